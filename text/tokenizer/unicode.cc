#include "text/tokenizer/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <algorithm>

namespace attnserve::unicode {

Decoded DecodeUtf8(std::string_view text) {
  if (text.empty()) return {0, 0, true};
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return {lead, 1, true};
  int length = 0;
  char32_t code_point = 0, minimum = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, code_point = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code_point = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code_point = lead & 0x07, minimum = 0x10000;
  } else {
    return {0xFFFD, 1, false};
  }
  if (text.size() < static_cast<size_t>(length)) return {0xFFFD, 1, false};
  for (int i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return {0xFFFD, 1, false};
    code_point = (code_point << 6) | (byte(i) & 0x3F);
  }
  if (code_point < minimum || code_point > 0x10FFFF ||
      (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    return {0xFFFD, 1, false};
  }
  return {code_point, length, true};
}

void AppendUtf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

namespace {

// The length of the longest prefix of `bytes` that can begin a valid UTF-8 sequence (a maximal
// subpart when it falls short of a whole char), and whether it is a whole char.
std::pair<size_t, bool> ValidPrefix(std::string_view bytes) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return {1, true};
  size_t length = 0;
  uint8_t low = 0x80, high = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return {1, false};
  }
  for (size_t i = 1; i < length; ++i) {
    if (i >= bytes.size()) return {i, false};
    const uint8_t b = byte(i);
    const bool ok = i == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {i, false};
  }
  return {length, true};
}

}  // namespace

std::string DecodeLossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const auto [length, valid] = ValidPrefix(bytes);
    if (valid) {
      out.append(bytes.substr(0, length));
    } else {
      out += "\xEF\xBF\xBD";
    }
    bytes.remove_prefix(length);
  }
  return out;
}

size_t IncompleteCharacterBytes(std::string_view bytes) {
  // The last character starts at most 3 bytes before the end, at a lead byte.
  for (size_t back = 1; back <= std::min<size_t>(3, bytes.size()); ++back) {
    const std::string_view tail = bytes.substr(bytes.size() - back);
    const uint8_t lead = static_cast<uint8_t>(tail[0]);
    if ((lead & 0xC0) == 0x80) continue;
    if (lead < 0xC2 || lead > 0xF4) return 0;
    const auto [length, valid] = ValidPrefix(tail);
    return !valid && length == back ? back : 0;  // ran out of bytes, not into a bad one
  }
  return 0;
}

bool IsValidUtf8(std::string_view bytes) {
  while (!bytes.empty()) {
    const auto [length, valid] = ValidPrefix(bytes);
    if (!valid) return false;
    bytes.remove_prefix(length);
  }
  return true;
}

namespace {

struct CodePointRange {
  char32_t first, last;
};

#include "text/tokenizer/unicode_tables.inc"

template <size_t kSize>
bool InTable(const CodePointRange (&table)[kSize], char32_t c) {
  const CodePointRange* after =
      std::upper_bound(table, table + kSize, c,
                       [](char32_t x, const CodePointRange& range) { return x < range.first; });
  return after != table && c <= (after - 1)->last;
}

}  // namespace

bool IsWhitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r');
  return InTable(kWhitespace, c);
}

bool IsOther(char32_t c) { return InTable(kOther, c); }
bool IsPunctuation(char32_t c) { return InTable(kPunctuation, c); }
bool IsNonspacingMark(char32_t c) { return InTable(kNonspacingMark, c); }
bool IsCombiningMark(char32_t c) { return InTable(kCombiningMark, c); }
bool IsNumeric(char32_t c) { return InTable(kNumeric, c); }

bool IsWordChar(char32_t c) {
  if (c < 0x80) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  return InTable(kWordChar, c);
}

bool IsAsciiPunctuation(char32_t c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
         (c >= '{' && c <= '~');
}

bool IsChineseChar(char32_t c) { return InTable(kChineseChar, c); }

std::u32string ToLowercase(char32_t c) {
  if (c < 0x80) return std::u32string(1, c >= 'A' && c <= 'Z' ? c + 32 : c);
  UChar in[2], out[8];
  int32_t in_length = 0;
  U16_APPEND_UNSAFE(in, in_length, static_cast<UChar32>(c));
  UErrorCode error = U_ZERO_ERROR;
  // The root locale: no Turkish or Lithuanian tailoring, as Rust's mapping has none.
  const int32_t out_length = u_strToLower(out, 8, in, in_length, "", &error);
  if (U_FAILURE(error)) return std::u32string(1, c);
  std::u32string lowered;
  for (int32_t i = 0; i < out_length;) {
    UChar32 code_point;
    U16_NEXT(out, i, out_length, code_point);
    lowered += static_cast<char32_t>(code_point);
  }
  return lowered;
}

// Normalization: ICU's data, but only for the chars the reference's (Unicode 9) data has: a
// char's combining class and decomposition never change once assigned, so ICU's agree there, and
// a char assigned since has class 0, no decomposition and no composite in the reference.
uint8_t CombiningClass(char32_t c) {
  if (!InTable(kNonZeroCombiningClass, c)) return 0;
  return u_getCombiningClass(static_cast<UChar32>(c));
}

namespace {

const icu::Normalizer2& Instance(bool compatibility) {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* instance = compatibility ? icu::Normalizer2::getNFKDInstance(error)
                                                   : icu::Normalizer2::getNFDInstance(error);
  return *instance;  // ICU's data is built in: these never fail
}

}  // namespace

std::u32string Decomposition(char32_t c, bool compatibility) {
  if (!InTable(kDecomposes, c)) return {};
  icu::UnicodeString mapping;
  if (!Instance(compatibility).getDecomposition(static_cast<UChar32>(c), mapping)) return {};
  std::u32string decomposed;
  for (int32_t i = 0; i < mapping.length();) {
    const UChar32 code_point = mapping.char32At(i);
    decomposed += static_cast<char32_t>(code_point);
    i += U16_LENGTH(code_point);
  }
  return decomposed;
}

char32_t Compose(char32_t first, char32_t second) {
  UErrorCode error = U_ZERO_ERROR;
  const UChar32 composite = icu::Normalizer2::getNFCInstance(error)->composePair(
      static_cast<UChar32>(first), static_cast<UChar32>(second));
  // A composite decomposes (into `first` and `second`): one the reference has is in kDecomposes.
  if (composite < 0 || !InTable(kDecomposes, static_cast<char32_t>(composite))) return 0;
  return static_cast<char32_t>(composite);
}

}  // namespace attnserve::unicode
