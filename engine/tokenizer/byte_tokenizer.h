// Byte-level tokenizer: ids 0-255 are the UTF-8 bytes of the text; special tokens (declared in
// config.json, ids >= 256) follow. Any text encodes; any id sequence decodes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve {

class ByteTokenizer {
 public:
  explicit ByteTokenizer(std::map<std::string, int64_t> special_tokens);

  std::vector<int64_t> Encode(const std::string& text) const;
  // Bytes that do not form valid UTF-8 become U+FFFD; unknown ids are an error.
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const;
  // One token's text (a special token's name, or its byte, possibly part of a character).
  absl::StatusOr<std::string> TokenText(int64_t id) const;
  // The id of a special token, or -1.
  int64_t SpecialId(const std::string& text) const;

 private:
  std::map<std::string, int64_t> special_tokens_;
  std::map<int64_t, std::string> special_by_id_;
};

// Replaces every byte that is not part of a valid UTF-8 sequence with U+FFFD.
std::string SanitizeUtf8(const std::string& bytes);

}  // namespace attnserve
