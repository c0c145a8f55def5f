// WordPiece (BERT's model; REFERENCE.md §6.2): greedy longest-match-first over the vocabulary,
// pieces after the first carrying the continuing-subword prefix; a word with a part that matches
// nothing, or longer than max_input_chars_per_word chars, is one unknown token.
#pragma once

#include <string>
#include <vector>

#include "text/tokenizer/tokenizer_model.h"

namespace attnserve {

class WordPiece final : public TokenizerModel {
 public:
  // From tokenizer.json's "model" object; errors name the field.
  static absl::StatusOr<std::unique_ptr<WordPiece>> FromJson(const nlohmann::json& model);

  absl::StatusOr<std::vector<ModelToken>> Tokenize(std::string_view word) const override;
  const Vocabulary& vocab() const override { return vocab_; }
  const char* type() const override { return "WordPiece"; }

 private:
  Vocabulary vocab_;
  std::string unk_token_, prefix_;
  int64_t unk_id_ = 0;
  size_t max_chars_ = 100;
};

}  // namespace attnserve
