#include "text/chat_template/jinja_text.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace attnserve::jinja {

char32_t CodePointAt(std::string_view text, size_t pos, size_t* length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  *length = 1;
  if (lead < 0x80) return lead;
  int continuation = 0;
  char32_t code_point = 0;
  char32_t minimum = 0;
  if ((lead & 0xE0) == 0xC0) {
    continuation = 1, code_point = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    continuation = 2, code_point = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    continuation = 3, code_point = lead & 0x07, minimum = 0x10000;
  } else {
    return 0xFFFD;
  }
  if (pos + continuation >= text.size()) return 0xFFFD;
  for (int i = 1; i <= continuation; ++i) {
    const unsigned char next = byte(pos + i);
    if ((next & 0xC0) != 0x80) return 0xFFFD;
    code_point = (code_point << 6) | (next & 0x3F);
  }
  if (code_point < minimum || code_point > 0x10FFFF ||
      (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    return 0xFFFD;
  }
  *length = continuation + 1;
  return code_point;
}

std::u32string DecodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    out.push_back(CodePointAt(text, pos, &length));
    pos += length;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) AppendUtf8(c, out);
  return out;
}

int64_t CodePointCount(std::string_view text) {
  int64_t count = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    CodePointAt(text, pos, &length);
    pos += length;
    ++count;
  }
  return count;
}

bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

size_t WhitespaceLengthAt(std::string_view text, size_t pos) {
  size_t length = 0;
  return IsPythonSpace(CodePointAt(text, pos, &length)) ? length : 0;
}

namespace {

// Pairs of (upper, lower) in blocks where an even code point is upper and the next lower.
bool InEvenUpperBlock(char32_t c) {
  return (c >= 0x0100 && c <= 0x012F) || (c >= 0x0132 && c <= 0x0137) ||
         (c >= 0x014A && c <= 0x0177) || (c >= 0x0460 && c <= 0x0481) ||
         (c >= 0x048A && c <= 0x04BF) || (c >= 0x04D0 && c <= 0x04FF);
}
// ... and blocks where an odd code point is upper.
bool InOddUpperBlock(char32_t c) {
  return (c >= 0x0139 && c <= 0x0148) || (c >= 0x0179 && c <= 0x017E) ||
         (c >= 0x04C1 && c <= 0x04CE);
}

}  // namespace

char32_t ToUpper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (InEvenUpperBlock(c)) return (c % 2 == 1) ? c - 1 : c;
  if (InOddUpperBlock(c)) return (c % 2 == 0) ? c - 1 : c;
  if (c == 0x17F) return 'S';
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t ToLower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (InEvenUpperBlock(c)) return (c % 2 == 0) ? c + 1 : c;
  if (InOddUpperBlock(c)) return (c % 2 == 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool IsUpper(char32_t c) { return ToLower(c) != c; }
bool IsLower(char32_t c) { return ToUpper(c) != c || c == 0xDF; }
bool IsCased(char32_t c) { return IsUpper(c) || IsLower(c); }

bool IsDigit(char32_t c) { return c >= '0' && c <= '9'; }

bool IsAlpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (IsCased(c) || c == 0xAA || c == 0xBA) return true;
  // Letters of uncased scripts: CJK, kana, Hangul, Arabic, Hebrew, Devanagari, Thai.
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3041 && c <= 0x3096) ||
         (c >= 0x30A1 && c <= 0x30FA) || (c >= 0xAC00 && c <= 0xD7A3) ||
         (c >= 0x0621 && c <= 0x064A) || (c >= 0x05D0 && c <= 0x05EA) ||
         (c >= 0x0904 && c <= 0x0939) || (c >= 0x0E01 && c <= 0x0E30);
}

bool IsAlnum(char32_t c) { return IsAlpha(c) || IsDigit(c); }

bool IsPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0xFFFE || c == 0xFFFF) {
    return false;
  }
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E) {
    return false;
  }
  return c <= 0x10FFFF && !(c >= 0xF0000);
}

std::string PythonUpper(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    const char32_t c = CodePointAt(text, pos, &length);
    if (c == 0xDF) {
      out += "SS";  // the one multi-character mapping templates might meet
    } else if (c == 0xFFFD) {
      out.append(text.substr(pos, length));
    } else {
      AppendUtf8(ToUpper(c), out);
    }
    pos += length;
  }
  return out;
}

std::string PythonLower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    const char32_t c = CodePointAt(text, pos, &length);
    if (c == 0xFFFD) {
      out.append(text.substr(pos, length));
    } else {
      AppendUtf8(ToLower(c), out);
    }
    pos += length;
  }
  return out;
}

std::string PythonFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string_view scientific(buffer, result.ptr - buffer);
  std::string out;
  if (!scientific.empty() && scientific[0] == '-') {
    out.push_back('-');
    scientific.remove_prefix(1);
  }
  const size_t e = scientific.find('e');
  std::string digits;
  for (char c : scientific.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  const int exponent = std::atoi(std::string(scientific.substr(e + 1)).c_str());
  const int point = exponent + 1;  // digits before the decimal point in fixed notation
  const int count = static_cast<int>(digits.size());
  if (exponent >= -4 && exponent < 16) {
    if (point <= 0) {
      out.append("0.");
      out.append(static_cast<size_t>(-point), '0');
      out.append(digits);
    } else if (point >= count) {
      out.append(digits);
      out.append(static_cast<size_t>(point - count), '0');
      out.append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(point));
      out.push_back('.');
      out.append(digits, static_cast<size_t>(point), std::string::npos);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (count > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  out += exponent < 0 ? "e-" : "e+";
  const std::string magnitude = std::to_string(std::abs(exponent));
  if (magnitude.size() < 2) out.push_back('0');
  out += magnitude;
  return out;
}

std::string PythonStringRepr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    const char32_t c = CodePointAt(text, pos, &length);
    pos += length;
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (IsPrintable(c)) {
      AppendUtf8(c, out);
    } else if (c < 0x100) {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else if (c < 0x10000) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out.push_back(kHex[(c >> shift) & 15]);
    } else {
      out += "\\U";
      for (int shift = 28; shift >= 0; shift -= 4) out.push_back(kHex[(c >> shift) & 15]);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace attnserve::jinja
