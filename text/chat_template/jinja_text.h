// Text helpers with Python's meaning: templates index, slice, strip and case-map strings as
// Python's str does (by code point), and print floats as Python's repr does. Strings are UTF-8;
// invalid bytes decode as U+FFFD so that nothing here can fail.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace attnserve::jinja {

// absl::StrCat that also takes std::string_view: Debian's Abseil has a string_view of its own.
template <typename... Args>
std::string StrCat(const Args&... args) {
  const auto convert = [](const auto& value) -> decltype(auto) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string_view>) {
      return absl::string_view(value.data(), value.size());
    } else {
      return (value);
    }
  };
  return absl::StrCat(convert(args)...);
}

// Decodes UTF-8 into code points (invalid sequences become U+FFFD, one per byte).
std::u32string DecodeUtf8(std::string_view text);
void AppendUtf8(char32_t code_point, std::string& out);
std::string EncodeUtf8(std::u32string_view text);
// The number of code points, as Python's len(str).
int64_t CodePointCount(std::string_view text);

// The code point at `pos` and its length in bytes (U+FFFD and 1 for an invalid byte).
char32_t CodePointAt(std::string_view text, size_t pos, size_t* length);

// str.isspace(): the characters Python's str.strip(), str.split() and the regex \s treat as
// whitespace.
bool IsPythonSpace(char32_t c);
// Byte length of the whitespace character at `pos`, or 0 when it is not whitespace.
size_t WhitespaceLengthAt(std::string_view text, size_t pos);

// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (what chat templates
// meet in role names and content); other scripts are left as they are.
char32_t ToUpper(char32_t c);
char32_t ToLower(char32_t c);
bool IsCased(char32_t c);
bool IsUpper(char32_t c);
bool IsLower(char32_t c);
bool IsAlpha(char32_t c);
bool IsDigit(char32_t c);
bool IsAlnum(char32_t c);
// str.isprintable() for one code point, as repr() decides what to escape.
bool IsPrintable(char32_t c);

std::string PythonUpper(std::string_view text);
std::string PythonLower(std::string_view text);

// float.__repr__: the shortest digits that round-trip, fixed notation for exponents in
// [-4, 16), else scientific ("1e-05", "1e+16"); "inf", "-inf", "nan".
std::string PythonFloatRepr(double value);
// repr(str): single quotes unless the text has ' and no ", escapes as Python does.
std::string PythonStringRepr(std::string_view text);

}  // namespace attnserve::jinja
