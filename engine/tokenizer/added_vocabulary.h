// Tokens added to a model's vocabulary (tokenizer.json's "added_tokens"; REFERENCE.md §7): found
// in the text before the model runs, the leftmost longest match first, with their single_word,
// lstrip, rstrip and normalized flags.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/normalized_text.h"
#include "nlohmann/json_fwd.hpp"

namespace attnserve {

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

class AddedVocabulary {
 public:
  // `model_id` gives a content's id in the model's vocabulary (or -1), `model_size` its size:
  // ids are assigned as the reference assigns them, not read from the file.
  static absl::StatusOr<AddedVocabulary> FromJson(
      const nlohmann::json& added_tokens,
      const std::function<int64_t(const std::string&)>& model_id, int64_t model_size);

  // Matches in `text` of the tokens with normalized == `normalized`: pieces covering the text,
  // each an added token's index or -1 for the text between.
  struct Match {
    ByteRange range;
    int token = -1;
  };
  std::vector<Match> Find(const std::string& text, bool normalized) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // The content of an added id, or nullptr.
  const AddedToken* ById(int64_t id) const;
  bool IsSpecial(const std::string& content) const { return special_.count(content) > 0; }

 private:
  std::vector<AddedToken> tokens_;  // in matching order: special first, then the others
  std::map<int64_t, size_t> by_id_;
  std::set<std::string> special_;
};

}  // namespace attnserve
