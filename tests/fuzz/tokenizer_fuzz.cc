// libFuzzer target: arbitrary bytes as text and as token ids through the byte tokenizer and the
// streaming text of generated tokens. Checks properties, not just the absence of crashes: every
// output is valid UTF-8, text round-trips through ids, and streamed pieces concatenate to the
// decoded text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "text/tokenizer/byte_tokenizer.h"
#include "text/tokenizer/text_stream.h"

namespace {

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    std::abort();
  }
}

// A strict UTF-8 check written independently of SanitizeUtf8 (RFC 3629, table 3-7 of Unicode).
bool IsValidUtf8(const std::string& text) {
  size_t i = 0;
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  while (i < text.size()) {
    const unsigned char c = byte(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    unsigned char low = 0x80, high = 0xBF;
    size_t length;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    } else {
      return false;
    }
    if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high) return false;
    for (size_t k = 2; k < length; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const attnserve::ByteTokenizer tokenizer({{"<|endoftext|>", 256}, {"<pad>", 257}});
  const std::string text(reinterpret_cast<const char*>(data), size);

  // Text: encodes to bytes, decodes back to itself with invalid bytes replaced.
  const std::string clean = attnserve::SanitizeUtf8(text);
  Require(IsValidUtf8(clean), "SanitizeUtf8 returned invalid UTF-8");
  Require(attnserve::SanitizeUtf8(clean) == clean, "SanitizeUtf8 is not idempotent");
  Require(!IsValidUtf8(text) || clean == text, "SanitizeUtf8 changed valid UTF-8");
  const std::vector<int64_t> ids = *tokenizer.EncodeIds(text);
  Require(ids.size() == text.size(), "Encode is not one id per byte");
  auto decoded = tokenizer.Decode(ids);
  Require(decoded.ok() && *decoded == clean, "Decode(Encode(text)) is not the sanitized text");

  // Ids: two bytes each, so specials and unknown ids occur. Decode refuses unknown ids; the
  // stream of a generation gives pieces of valid UTF-8 that, with what Finish flushes, add up
  // to the decoded text.
  std::vector<int64_t> token_ids;
  bool known = true;
  for (size_t i = 0; i + 1 < size; i += 2) {
    const int64_t id = (data[i] | (data[i + 1] << 8)) % 300;
    token_ids.push_back(id);
    known = known && id < 258;
  }
  auto from_ids = tokenizer.Decode(token_ids);
  Require(from_ids.ok() == known, "Decode accepted an unknown id or refused a known one");
  if (!known) return 0;
  attnserve::TextStream stream(tokenizer, {});
  std::string streamed;
  for (int64_t id : token_ids) {
    const std::string piece = stream.Push(id);
    Require(IsValidUtf8(piece), "a streamed piece is invalid UTF-8");
    streamed += piece;
  }
  const std::string rest = stream.Finish();
  Require(IsValidUtf8(rest), "the streamed rest is invalid UTF-8");
  streamed += rest;
  Require(streamed == *from_ids, "streamed pieces differ from the decoded text");
  return 0;
}
