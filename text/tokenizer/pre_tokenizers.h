// Pre-tokenizers of tokenizer.json (REFERENCE.md §5): they split the text into the words the
// model tokenizes, each word keeping its alignment to the input.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "text/tokenizer/model_token.h"
#include "text/tokenizer/normalized_text.h"

namespace attnserve {

// One part of the input: a word to tokenize, or an added token already found in the text.
struct TextSplit {
  NormalizedText text;
  std::optional<ModelToken> added;
};

// Replaces every split that is not an added token by `split`'s parts; empty parts are dropped.
void SplitEach(std::vector<TextSplit>& splits,
               const std::function<std::vector<NormalizedText>(const NormalizedText&)>& split);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void Apply(std::vector<TextSplit>& splits) const = 0;
};

// From tokenizer.json's "pre_tokenizer" (null: none); an unsupported type is an error naming it.
absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const nlohmann::json& json);

}  // namespace attnserve
