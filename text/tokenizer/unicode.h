// Unicode for the tokenizers: UTF-8 decoding and encoding, and the character properties and
// mappings Hugging Face's tokenizers use, each of the Unicode version the reference's tables have
// (REFERENCE.md §0): the properties from unicode_tables.inc, which
// scripts/generate_unicode_tables.py derives from the reference; normalization from ICU, limited
// to the chars the reference's tables know; lowercase from ICU, whose Unicode is the reference's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace attnserve::unicode {

// One code point decoded from the front of `text`.
struct Decoded {
  char32_t code_point = 0;
  int bytes = 0;      // 0 when `text` is empty
  bool valid = true;  // false: an invalid or truncated sequence; code_point is U+FFFD, bytes 1
};
Decoded DecodeUtf8(std::string_view text);
void AppendUtf8(char32_t code_point, std::string& out);
// `bytes` as UTF-8, each maximal invalid subpart replaced by one U+FFFD (as Rust's
// String::from_utf8_lossy and Python's bytes.decode("utf-8", "replace") do).
std::string DecodeLossy(std::string_view bytes);
// Whether `bytes` is valid UTF-8.
bool IsValidUtf8(std::string_view bytes);
// How many of the last bytes of `bytes` begin a character that more bytes could complete (0 when
// it ends on a character boundary or in bytes that no more bytes could make valid).
size_t IncompleteCharacterBytes(std::string_view bytes);

// Rust's char::is_whitespace: the White_Space property (and the regex crate's \s, the same).
bool IsWhitespace(char32_t c);
// General categories, as Rust's unicode_categories crate groups them (Unicode 8-era tables).
bool IsOther(char32_t c);           // Cc, Cf, Co (not Cn or Cs, as that crate has it)
bool IsPunctuation(char32_t c);     // P*
bool IsNonspacingMark(char32_t c);  // Mn
// M*: Mn, Mc, Me, as unicode-normalization-alignments has them (Unicode 9).
bool IsCombiningMark(char32_t c);
bool IsAsciiPunctuation(char32_t c);
// Rust's char::is_numeric: Nd, Nl, No.
bool IsNumeric(char32_t c);
// The regex crate's \w: Alphabetic, M*, Nd, Pc, Join_Control.
bool IsWordChar(char32_t c);
// BERT's CJK ranges (the CJK Unified Ideographs blocks and their extensions).
bool IsChineseChar(char32_t c);

// Rust's char::to_lowercase: the full, context-free lowercase mapping (one or more code points).
std::u32string ToLowercase(char32_t c);

// Canonical combining class, the full canonical (or compatibility) decomposition of one code point
// (empty when it has none), and the primary composite of a pair (0 when there is none), as
// unicode-normalization-alignments has them (Unicode 9).
uint8_t CombiningClass(char32_t c);
std::u32string Decomposition(char32_t c, bool compatibility);
char32_t Compose(char32_t first, char32_t second);

}  // namespace attnserve::unicode
