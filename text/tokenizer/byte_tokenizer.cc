#include "text/tokenizer/byte_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {

ByteTokenizer::ByteTokenizer(std::map<std::string, int64_t> special_tokens)
    : special_tokens_(std::move(special_tokens)) {
  for (const auto& [text, id] : special_tokens_) special_by_id_[id] = text;
}

absl::StatusOr<Encoding> ByteTokenizer::Encode(const std::string& text, bool) const {
  Encoding encoding;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    encoding.Add(byte, TokenText(byte), {i, i + 1}, false);
  }
  return encoding;
}

absl::StatusOr<std::vector<int64_t>> ByteTokenizer::EncodeIds(const std::string& text) const {
  return std::vector<int64_t>(reinterpret_cast<const unsigned char*>(text.data()),
                              reinterpret_cast<const unsigned char*>(text.data()) + text.size());
}

absl::StatusOr<std::string> ByteTokenizer::Decode(const std::vector<int64_t>& ids,
                                                  bool skip_special_tokens) const {
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
    text += SanitizeUtf8(pending);
    if (!skip_special_tokens) text += special->second;
    pending.clear();
  }
  return text + SanitizeUtf8(pending);
}

size_t ByteTokenizer::IncompleteCharacterTokens(const std::vector<int64_t>& ids) const {
  std::string tail;  // the last bytes, back to a special token; one token each
  for (auto id = ids.rbegin(); id != ids.rend() && tail.size() < 4 && *id >= 0 && *id < 256; ++id) {
    tail.insert(tail.begin(), static_cast<char>(*id));
  }
  return unicode::IncompleteCharacterBytes(tail);
}

std::string ByteTokenizer::TokenText(int64_t id) const {
  if (id >= 0 && id < 0x80) return std::string(1, static_cast<char>(id));
  if (id >= 0x80 && id < 256) return absl::StrFormat("<0x%02X>", id);
  auto special = special_by_id_.find(id);
  return special == special_by_id_.end() ? absl::StrFormat("<%d>", id) : special->second;
}

std::optional<std::string> ByteTokenizer::TokenBytes(int64_t id) const {
  if (id < 0 || id >= 256) return std::nullopt;
  return std::string(1, static_cast<char>(id));
}

int64_t ByteTokenizer::vocab_size() const {
  return special_by_id_.empty() ? 256 : std::max<int64_t>(256, special_by_id_.rbegin()->first + 1);
}

int64_t ByteTokenizer::TokenToId(const std::string& token) const {
  auto it = special_tokens_.find(token);
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
