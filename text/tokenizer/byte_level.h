// GPT-2's byte-level alphabet (REFERENCE.md §5.1): each of the 256 byte values as a printable
// char, so that any text becomes a string of vocabulary symbols and back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace attnserve::byte_level {

char32_t ByteToChar(uint8_t byte);
// The byte a char of the alphabet stands for, or -1 for a char outside it.
int CharToByte(char32_t c);
// The alphabet's spelling of `bytes`.
std::string Encode(std::string_view bytes);

}  // namespace attnserve::byte_level
