// What one model's answers may be constrained to: the constraint compiler over its vocabulary
// (text/structured/), made when the first constrained request comes, since building llguidance's
// view of a large vocabulary takes a moment that models never asked for one should not pay.
// Any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "engine/architectures/model.h"
#include "text/structured/constraint_compiler.h"

namespace attnserve::server {

class ModelConstraints {
 public:
  ModelConstraints(std::string name, const Model& model,
                   structured::ConstraintCompiler::Limits limits)
      : name_(std::move(name)), model_(model), limits_(limits) {}

  // A matcher at the start of an answer. INVALID_ARGUMENT says what is wrong with the
  // constraint, or that the model has no tokenizer to constrain.
  absl::StatusOr<std::unique_ptr<structured::TokenMatcher>> Compile(
      const structured::ConstraintSpec& spec) const;

 private:
  const std::string name_;
  const Model& model_;
  const structured::ConstraintCompiler::Limits limits_;
  mutable std::once_flag once_;
  mutable absl::StatusOr<std::unique_ptr<structured::ConstraintCompiler>> compiler_ =
      absl::UnknownError("not made yet");
};

}  // namespace attnserve::server
