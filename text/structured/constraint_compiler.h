// Compiles what requests constrain their answers to (ConstraintSpec) into token matchers for one
// model's vocabulary, with llguidance (docs/structured-outputs.md). What a constraint may cost is
// bounded: its text by `max_bytes`, its compilation and each token's mask by llguidance's limits
// on grammar size, lexer states and work per step. Compiled constraints are kept by their text,
// so a schema sent with every request is compiled once. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "text/structured/constraint_spec.h"
#include "text/structured/token_matcher.h"
#include "text/tokenizer/tokenizer.h"

struct LlgTokenizer;
struct LlgMatcher;

namespace attnserve::structured {

class ConstraintCompiler {
 public:
  struct Limits {
    int64_t max_bytes = 1 << 20;  // a schema's, regex's or grammar's text
    size_t cached = 64;           // compiled constraints kept, the least recently used dropped
  };

  // For a model whose logits have `vocab_size` entries (its tokenizer may know fewer ids) and
  // whose answers end at any of `end_of_text` (none: a constraint then ends an answer only once
  // nothing can follow). The tokenizer must outlive the compiler.
  static absl::StatusOr<std::unique_ptr<ConstraintCompiler>> Create(
      const Tokenizer& tokenizer, int64_t vocab_size, const std::vector<int64_t>& end_of_text,
      Limits limits);
  ~ConstraintCompiler();

  // A matcher at the start of the answer. INVALID_ARGUMENT names what is wrong with the
  // constraint (and where, for schemas, regexes and grammars), or the limit it exceeds.
  absl::StatusOr<std::unique_ptr<TokenMatcher>> Compile(const ConstraintSpec& spec);

  int64_t vocab_size() const { return vocab_size_; }

 private:
  ConstraintCompiler(LlgTokenizer* tokenizer, int64_t vocab_size, Limits limits)
      : tokenizer_(tokenizer), vocab_size_(vocab_size), limits_(limits) {}
  // A fresh matcher of `spec` as llguidance's constraint type and text.
  absl::StatusOr<LlgMatcher*> Build(const ConstraintSpec& spec) const;

  LlgTokenizer* const tokenizer_;
  const int64_t vocab_size_;
  const Limits limits_;

  // Compiled constraints by kind and text, most recently used first; each is cloned for a
  // request, never used itself.
  std::mutex mutex_;
  std::list<std::pair<std::string, LlgMatcher*>> cache_;
  absl::flat_hash_map<std::string, std::list<std::pair<std::string, LlgMatcher*>>::iterator> index_;
};

}  // namespace attnserve::structured
