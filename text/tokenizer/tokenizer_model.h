// The model of a tokenizer.json (REFERENCE.md §6): what turns one pre-tokenized word into
// vocabulary tokens. BPE, WordPiece and Unigram implement it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"
#include "text/tokenizer/model_token.h"

namespace attnserve {

struct Vocabulary {
  absl::flat_hash_map<std::string, int64_t> ids;
  // By id. A map, not a table as long as the largest id: a file may give any id below 2^31, and a
  // few bytes of it would otherwise claim gigabytes.
  absl::flat_hash_map<int64_t, std::string> tokens;
  int64_t end_id = 0;  // one past the largest id
  int64_t size = 0;    // as the reference counts it (model-specific)

  int64_t Id(std::string_view token) const {
    auto it = ids.find(absl::string_view(token.data(), token.size()));
    return it == ids.end() ? -1 : it->second;
  }
  // The token of `id`, or null.
  const std::string* Token(int64_t id) const {
    auto it = tokens.find(id);
    return it == tokens.end() ? nullptr : &it->second;
  }
  // Gives `id` to `token` in `tokens` (the last one given wins).
  void AddToken(int64_t id, std::string token) {
    tokens[id] = std::move(token);
    end_id = std::max(end_id, id + 1);
  }
};

// The "vocab" of a model object, a {token: id} object (BPE's and WordPiece's); size is the
// number of tokens.
absl::StatusOr<Vocabulary> VocabularyFromJson(const nlohmann::json& model);

class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;
  // The tokens of one word, with byte ranges in it; an error names what the model cannot encode.
  virtual absl::StatusOr<std::vector<ModelToken>> Tokenize(std::string_view word) const = 0;
  virtual const Vocabulary& vocab() const = 0;
  virtual const char* type() const = 0;
};

// From tokenizer.json's "model"; errors name the field.
absl::StatusOr<std::unique_ptr<TokenizerModel>> TokenizerModelFromJson(const nlohmann::json& json);

}  // namespace attnserve
