// Tokens added to a model's vocabulary (tokenizer.json's "added_tokens"; REFERENCE.md §7): found
// in the text before the model runs, the leftmost longest match first, with their single_word,
// lstrip, rstrip and normalized flags.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "text/tokenizer/normalized_text.h"

namespace attnserve {

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

class AddedVocabulary {
 public:
  // `model_id` gives a content's id in the model's vocabulary (or -1), `model_size` its size:
  // ids are assigned as the reference assigns them, not read from the file. `normalize` gives
  // the text that a normalized token is looked for as (its content, normalized).
  static absl::StatusOr<AddedVocabulary> FromJson(
      const nlohmann::json& added_tokens,
      const std::function<int64_t(const std::string&)>& model_id, int64_t model_size,
      const std::function<std::string(const std::string&)>& normalize);

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
  // A byte trie of the patterns of one kind (raw or normalized): node 0 is the root.
  struct Trie {
    std::vector<int32_t> token{-1};  // per node: the token whose pattern ends there, or -1
    absl::flat_hash_map<uint64_t, int32_t> children;  // (node << 8 | byte) -> node
    std::array<bool, 256> starts{};                   // bytes that begin a pattern
    void Insert(const std::string& pattern, int32_t index);
    // The longest pattern at text[at..]: (token, length), or (-1, 0).
    std::pair<int32_t, size_t> Longest(const std::string& text, size_t at) const;
  };

  std::vector<AddedToken> tokens_;  // in matching order: special first, then the others
  Trie tries_[2];                   // [normalized]
  std::map<int64_t, size_t> by_id_;
  std::set<std::string> special_;
};

}  // namespace attnserve
