#include "engine/tokenizer/byte_tokenizer.h"

#include "absl/strings/str_cat.h"

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
  static const std::string kReplacement = "\xEF\xBF\xBD";
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    int length = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    bool valid = length > 0 && i + length <= bytes.size();
    for (int k = 1; valid && k < length; ++k) {
      valid = (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80;
    }
    if (valid && length > 1) {
      // Reject overlong forms, surrogates and code points past U+10FFFF.
      uint32_t cp = c & (0xFF >> (length + 1));
      for (int k = 1; k < length; ++k) cp = (cp << 6) | (bytes[i + k] & 0x3F);
      static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      valid = cp >= kMin[length] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (valid) {
      out.append(bytes, i, length);
      i += length;
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

}  // namespace attnserve
