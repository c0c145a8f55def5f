// libFuzzer target: arbitrary bytes as a constraint. The first byte picks the kind (JSON schema,
// regex, Lark, GBNF, choice), the rest is its text (for a choice, lines). Compiling either
// refuses it with INVALID_ARGUMENT or gives a matcher, which then walks up to 64 tokens, always
// the first one allowed: masks, tokens taken and completion, or a RESOURCE_EXHAUSTED error at a
// step; never a crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_split.h"
#include "text/structured/constraint_compiler.h"
#include "text/tokenizer/byte_tokenizer.h"

namespace {

using attnserve::structured::ConstraintCompiler;
using attnserve::structured::ConstraintSpec;

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "constraint_fuzz: %s\n", what);
    std::abort();
  }
}

constexpr int64_t kVocab = 260;
constexpr int64_t kEnd = 256;

ConstraintCompiler& Compiler() {
  static const auto* tokenizer = new attnserve::ByteTokenizer({{"<|endoftext|>", kEnd}});
  static ConstraintCompiler* compiler =
      ConstraintCompiler::Create(*tokenizer, kVocab, {kEnd}, {.max_bytes = 16 << 10, .cached = 4})
          ->release();
  return *compiler;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 16 * 1024) return 0;
  using Kind = ConstraintSpec::Kind;
  constexpr Kind kKinds[] = {Kind::kJsonSchema, Kind::kRegex,  Kind::kLark,
                             Kind::kGbnf,       Kind::kChoice, Kind::kJsonObject};
  ConstraintSpec spec{.kind = kKinds[data[0] % 6],
                      .text = std::string(reinterpret_cast<const char*>(data) + 1, size - 1),
                      .choices = {}};
  if (spec.kind == Kind::kChoice) {
    spec.choices = absl::StrSplit(spec.text, '\n');
    spec.text.clear();
  }
  auto matcher = Compiler().Compile(spec);
  if (!matcher.ok()) {
    Require(matcher.status().code() == absl::StatusCode::kInvalidArgument,
            "a refusal is not INVALID_ARGUMENT");
    return 0;
  }
  for (int step = 0; step < 64 && !(*matcher)->Complete(); ++step) {
    auto mask = (*matcher)->AllowedTokens();
    if (!mask.ok()) {
      Require(mask.status().code() == absl::StatusCode::kResourceExhausted,
              "a step's error is not RESOURCE_EXHAUSTED");
      return 0;
    }
    int64_t token = -1;
    for (int64_t t = 0; t < kVocab && token < 0; ++t) {
      if (((*mask)[t / 32] >> (t % 32)) & 1) token = t;
    }
    if (token < 0 || token == kEnd) return 0;
    Require((*matcher)->Consume(token).ok(), "an allowed token is refused");
  }
  return 0;
}
