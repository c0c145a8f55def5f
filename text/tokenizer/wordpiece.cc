#include "text/tokenizer/wordpiece.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<WordPiece>> WordPiece::FromJson(const nlohmann::json& model) {
  auto wordpiece = std::make_unique<WordPiece>();
  const auto field = [&](const char* name) -> const nlohmann::json* {
    auto it = model.find(name);
    return it == model.end() ? nullptr : &*it;
  };
  const nlohmann::json* unk = field("unk_token");
  const nlohmann::json* prefix = field("continuing_subword_prefix");
  const nlohmann::json* max_chars = field("max_input_chars_per_word");
  ASSIGN_OR_RETURN(wordpiece->vocab_, VocabularyFromJson(model));
  if (unk == nullptr || !unk->is_string()) {
    return absl::InvalidArgumentError("model.unk_token: a string is required");
  }
  if (prefix == nullptr || !prefix->is_string()) {
    return absl::InvalidArgumentError("model.continuing_subword_prefix: a string is required");
  }
  if (max_chars == nullptr || !max_chars->is_number_unsigned()) {
    return absl::InvalidArgumentError(
        "model.max_input_chars_per_word: a non-negative integer is required");
  }
  wordpiece->unk_token_ = unk->get<std::string>();
  wordpiece->prefix_ = prefix->get<std::string>();
  wordpiece->max_chars_ = max_chars->get<size_t>();
  wordpiece->unk_id_ = wordpiece->vocab_.Id(wordpiece->unk_token_);
  if (wordpiece->unk_id_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.unk_token: \"", wordpiece->unk_token_, "\" is not in the vocabulary"));
  }
  return wordpiece;
}

absl::StatusOr<std::vector<ModelToken>> WordPiece::Tokenize(std::string_view word) const {
  const std::vector<ModelToken> unknown{{unk_id_, unk_token_, {0, word.size()}}};
  // Byte offsets of every char boundary, so that candidates shrink a char at a time.
  std::vector<size_t> boundaries;
  for (size_t at = 0; at < word.size();) {
    boundaries.push_back(at);
    at += unicode::DecodeUtf8(word.substr(at)).bytes;
  }
  if (boundaries.size() > max_chars_) return unknown;
  boundaries.push_back(word.size());
  std::vector<ModelToken> tokens;
  std::string candidate;
  for (size_t start = 0; start + 1 < boundaries.size();) {
    bool found = false;
    for (size_t end = boundaries.size() - 1; end > start; --end) {
      candidate = start > 0 ? prefix_ : std::string();
      candidate.append(word.substr(boundaries[start], boundaries[end] - boundaries[start]));
      if (auto it = vocab_.ids.find(candidate); it != vocab_.ids.end()) {
        tokens.push_back({it->second, candidate, {boundaries[start], boundaries[end]}});
        start = end;
        found = true;
        break;
      }
    }
    if (!found) return unknown;
  }
  return tokens;
}

}  // namespace attnserve
