// Text for tokens on the wire, where every string must be valid UTF-8 while a byte-level token
// can be half a character.
#pragma once

#include <cstdint>
#include <string>

#include "engine/tokenizer/byte_tokenizer.h"

namespace attnserve::server {

// One token on its own: ASCII as itself, other bytes as "<0xE6>", special tokens by name.
std::string DisplayText(const ByteTokenizer& tokenizer, int64_t id);

// Turns a stream of generated tokens into text: bytes are held back until they complete a
// UTF-8 character, so each piece is valid UTF-8 and the pieces concatenate to the text.
class Utf8Stream {
 public:
  explicit Utf8Stream(const ByteTokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  // The text that token `id` completes (possibly empty).
  std::string Push(int64_t id);
  // All bytes generated so far, raw (for stop sequences).
  const std::string& bytes() const { return bytes_; }

 private:
  const ByteTokenizer* tokenizer_;  // a pointer, so generations can be moved
  std::string pending_, bytes_;
};

}  // namespace attnserve::server
