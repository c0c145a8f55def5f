#include "text/tokenizer/byte_level.h"

#include <array>

#include "text/tokenizer/unicode.h"

namespace attnserve::byte_level {
namespace {

struct Alphabet {
  std::array<char32_t, 256> chars{};
  std::array<std::string, 256> utf8;
  Alphabet() {
    // Printable Latin-1 bytes stand for themselves; the others, in order, for U+0100 onwards.
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      chars[b] = printable ? static_cast<char32_t>(b) : next++;
      unicode::AppendUtf8(chars[b], utf8[b]);
    }
  }
};

const Alphabet& TheAlphabet() {
  static const Alphabet alphabet;
  return alphabet;
}

}  // namespace

char32_t ByteToChar(uint8_t byte) { return TheAlphabet().chars[byte]; }

int CharToByte(char32_t c) {
  if ((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) {
    return static_cast<int>(c);
  }
  if (c < 0x100 || c >= 0x100 + 68) return -1;
  const Alphabet& alphabet = TheAlphabet();
  for (int b = 0; b < 256; ++b) {
    if (alphabet.chars[b] == c) return b;
  }
  return -1;
}

std::string Encode(std::string_view bytes) {
  const Alphabet& alphabet = TheAlphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) out += alphabet.utf8[static_cast<uint8_t>(b)];
  return out;
}

}  // namespace attnserve::byte_level
