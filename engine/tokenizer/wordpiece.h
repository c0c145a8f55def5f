// WordPiece (BERT's model; REFERENCE.md §6.2): greedy longest-match-first over the vocabulary,
// pieces after the first carrying the continuing-subword prefix; a word with a part that matches
// nothing, or longer than max_input_chars_per_word chars, is one unknown token.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/model_token.h"
#include "nlohmann/json_fwd.hpp"

namespace attnserve {

class WordPiece {
 public:
  // From tokenizer.json's "model" object; errors name the field.
  static absl::StatusOr<WordPiece> FromJson(const nlohmann::json& model);

  std::vector<ModelToken> Tokenize(const std::string& word) const;
  const std::unordered_map<std::string, int64_t>& vocab() const { return vocab_; }

 private:
  std::unordered_map<std::string, int64_t> vocab_;
  std::string unk_token_, prefix_;
  int64_t unk_id_ = 0;
  size_t max_chars_ = 100;
};

}  // namespace attnserve
