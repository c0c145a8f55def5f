#include "server/core/model_constraints.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attnserve::server {

absl::StatusOr<std::unique_ptr<structured::TokenMatcher>> ModelConstraints::Compile(
    const structured::ConstraintSpec& spec) const {
  if (model_.tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", name_, " has no tokenizer, so its answers cannot be constrained"));
  }
  std::call_once(once_, [&] {
    const absl::Time start = absl::Now();
    compiler_ = structured::ConstraintCompiler::Create(*model_.tokenizer, model_.config.vocab_size,
                                                       model_.end_of_text, limits_);
    std::cerr << "attnserve: model " << name_ << ": constrained decoding "
              << (compiler_.ok() ? "ready" : std::string(compiler_.status().message())) << " ("
              << absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
              << ")\n";
  });
  if (!compiler_.ok()) return compiler_.status();
  return (*compiler_)->Compile(spec);
}

}  // namespace attnserve::server
