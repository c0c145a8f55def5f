#include "engine/tokenizer/byte_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/unicode.h"

namespace attnserve {

ByteTokenizer::ByteTokenizer(std::map<std::string, int64_t> special_tokens)
    : special_tokens_(std::move(special_tokens)) {
  for (const auto& [text, id] : special_tokens_) special_by_id_[id] = text;
}

std::vector<int64_t> ByteTokenizer::Encode(const std::string& text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

absl::StatusOr<std::string> ByteTokenizer::Decode(const std::vector<int64_t>& ids) const {
  std::string text, pending;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= 0 && ids[i] < 256) {
      pending.push_back(static_cast<char>(ids[i]));
      continue;
    }
    auto special = special_by_id_.find(ids[i]);
    if (special == special_by_id_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at position ", i, " is not in the vocabulary"));
    }
    text += SanitizeUtf8(pending) + special->second;
    pending.clear();
  }
  return text + SanitizeUtf8(pending);
}

absl::StatusOr<std::string> ByteTokenizer::TokenText(int64_t id) const {
  if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
  auto special = special_by_id_.find(id);
  if (special == special_by_id_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not in the vocabulary"));
  }
  return special->second;
}

int64_t ByteTokenizer::SpecialId(const std::string& text) const {
  auto it = special_tokens_.find(text);
  return it == special_tokens_.end() ? -1 : it->second;
}

std::string SanitizeUtf8(const std::string& bytes) {
  std::string out;
  for (std::string_view rest = bytes; !rest.empty();) {
    const unicode::Decoded d = unicode::DecodeUtf8(rest);
    if (d.valid) {
      out.append(rest.substr(0, d.bytes));
    } else {
      unicode::AppendUtf8(0xFFFD, out);
    }
    rest.remove_prefix(d.bytes);
  }
  return out;
}

}  // namespace attnserve
