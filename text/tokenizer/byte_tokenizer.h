// Byte-level tokenizer: ids 0-255 are the UTF-8 bytes of the text; special tokens (declared in
// config.json, ids >= 256) follow. Any text encodes; any id sequence of known ids decodes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace attnserve {

class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(std::map<std::string, int64_t> special_tokens);

  // Special tokens are not looked for in the text: "<|endoftext|>" is 13 bytes.
  absl::StatusOr<Encoding> Encode(const std::string& text,
                                  bool add_special_tokens = true) const override;
  absl::StatusOr<std::vector<int64_t>> EncodeIds(const std::string& text) const override;
  // Unknown ids are an error.
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids,
                                     bool skip_special_tokens = false) const override;
  size_t IncompleteCharacterTokens(const std::vector<int64_t>& ids) const override;
  // ASCII as itself, other bytes as "<0xE6>", special tokens by name; "<id>" if unknown.
  std::string TokenText(int64_t id) const override;
  std::optional<std::string> TokenBytes(int64_t id) const override;

  std::string type() const override { return "byte"; }
  int64_t vocab_size() const override;
  std::map<std::string, int64_t> special_tokens() const override { return special_tokens_; }
  int64_t TokenToId(const std::string& token) const override;

 private:
  std::map<std::string, int64_t> special_tokens_;
  std::map<int64_t, std::string> special_by_id_;
};

// Replaces every byte that is not part of a valid UTF-8 sequence with U+FFFD.
std::string SanitizeUtf8(const std::string& bytes);

}  // namespace attnserve
