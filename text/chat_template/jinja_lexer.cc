#include "text/chat_template/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "text/chat_template/jinja_text.h"

namespace attnserve::jinja {
namespace {

bool IsDigitChar(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// What jinja2 does to the source before lexing: every \r\n and \r becomes \n, and one trailing
// newline goes (keep_trailing_newline is off).
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's str.rstrip(): the length of `text` without its trailing whitespace.
size_t RstripLength(std::string_view text) {
  // Whitespace characters are at most 3 bytes; walk back over UTF-8 sequences.
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80 &&
           end - start < 4) {
      --start;
    }
    if (WhitespaceLengthAt(text, start) != end - start) break;
    end = start;
  }
  return end;
}

bool AllWhitespace(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = WhitespaceLengthAt(text, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

size_t SkipWhitespace(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    const size_t length = WhitespaceLengthAt(text, pos);
    if (length == 0) break;
    pos += length;
  }
  return pos;
}

// `(\d+_)*\d+`: digits, single underscores between them.
size_t MatchDigits(std::string_view text, size_t pos) {
  size_t i = pos;
  if (i >= text.size() || !IsDigitChar(text[i])) return 0;
  while (i < text.size()) {
    if (IsDigitChar(text[i])) {
      ++i;
    } else if (text[i] == '_' && i + 1 < text.size() && IsDigitChar(text[i + 1])) {
      ++i;
    } else {
      break;
    }
  }
  return i - pos;
}

// jinja2's float_re; returns the match length or 0.
size_t MatchFloat(std::string_view text, size_t pos) {
  if (pos > 0 && text[pos - 1] == '.') return 0;
  const size_t whole = MatchDigits(text, pos);
  if (whole == 0) return 0;
  const auto exponent_at = [&](size_t at) -> size_t {
    if (at >= text.size() || (text[at] != 'e' && text[at] != 'E')) return 0;
    size_t p = at + 1;
    if (p < text.size() && (text[p] == '+' || text[p] == '-')) ++p;
    const size_t digits = MatchDigits(text, p);
    return digits == 0 ? 0 : p + digits - at;
  };
  size_t end = pos + whole;
  size_t fraction = 0;
  if (end < text.size() && text[end] == '.') {
    const size_t digits = MatchDigits(text, end + 1);
    if (digits > 0) fraction = digits + 1;
  }
  if (size_t exponent = exponent_at(end + fraction); exponent > 0) {
    return whole + fraction + exponent;
  }
  if (size_t exponent = exponent_at(end); exponent > 0 && fraction == 0) {
    return whole + exponent;
  }
  return fraction > 0 ? whole + fraction : 0;
}

// jinja2's integer_re; returns the match length or 0.
size_t MatchInteger(std::string_view text, size_t pos) {
  const auto prefixed = [&](char prefix, auto is_digit) -> size_t {
    if (pos + 1 >= text.size() || text[pos] != '0' ||
        absl::ascii_tolower(static_cast<unsigned char>(text[pos + 1])) != prefix) {
      return 0;
    }
    size_t i = pos + 2;
    size_t digits = 0;
    while (i < text.size()) {
      if (is_digit(text[i])) {
        ++i, ++digits;
      } else if (text[i] == '_' && i + 1 < text.size() && is_digit(text[i + 1])) {
        ++i;
      } else {
        break;
      }
    }
    return digits > 0 ? i - pos : 0;
  };
  if (size_t n = prefixed('b', [](char c) { return c == '0' || c == '1'; })) return n;
  if (size_t n = prefixed('o', [](char c) { return c >= '0' && c <= '7'; })) return n;
  if (size_t n = prefixed('x', [](char c) { return absl::ascii_isxdigit(c); })) return n;
  if (pos >= text.size() || !IsDigitChar(text[pos])) return 0;
  if (text[pos] != '0') return MatchDigits(text, pos);
  size_t i = pos + 1;  // 0(_?0)*
  while (i < text.size()) {
    if (text[i] == '0') {
      ++i;
    } else if (text[i] == '_' && i + 1 < text.size() && text[i + 1] == '0') {
      i += 2;
    } else {
      break;
    }
  }
  return i - pos;
}

// The string literal's length, quotes included, or 0 when it is not terminated.
size_t MatchString(std::string_view text, size_t pos) {
  const char quote = text[pos];
  for (size_t i = pos + 1; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      return i + 1 - pos;
    }
  }
  return 0;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  return absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10;
}

// Python's `.encode("ascii", "backslashreplace").decode("unicode-escape")`, which jinja2 applies
// to string literals.
absl::StatusOr<std::string> UnescapeString(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size();) {
    if (body[i] != '\\') {
      out.push_back(body[i++]);
      continue;
    }
    if (i + 1 >= body.size()) return absl::InvalidArgumentError("\\ at end of string");
    const char c = body[i + 1];
    i += 2;
    switch (c) {
      case '\n':
        break;  // a line continuation
      case '\\':
      case '\'':
      case '"':
        out.push_back(c);
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        char32_t code_point = 0;
        for (size_t k = 0; k < digits; ++k) {
          if (i + k >= body.size() || !absl::ascii_isxdigit(body[i + k])) {
            return absl::InvalidArgumentError(
                StrCat("truncated \\", std::string(1, c), "XXXX escape"));
          }
          code_point = code_point * 16 + HexValue(body[i + k]);
        }
        i += digits;
        if (code_point > 0x10FFFF) return absl::InvalidArgumentError("illegal Unicode character");
        if (code_point >= 0xD800 && code_point <= 0xDFFF) code_point = 0xFFFD;
        AppendUtf8(code_point, out);
        break;
      }
      case 'N':
        return absl::InvalidArgumentError("unsupported \\N{...} escape");
      default:
        if (c >= '0' && c <= '7') {
          char32_t code_point = c - '0';
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k) {
            code_point = code_point * 8 + (body[i++] - '0');
          }
          AppendUtf8(code_point, out);
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          // backslashreplace turned the character into an escape, and the backslash before it
          // escapes that escape's own backslash: "\é" reads as the 5 characters "\xe9".
          size_t length = 0;
          const char32_t code_point = CodePointAt(body, i - 1, &length);
          i += length - 1;
          char buffer[16];
          if (code_point < 0x100) {
            std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned>(code_point));
          } else if (code_point < 0x10000) {
            std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(code_point));
          } else {
            std::snprintf(buffer, sizeof buffer, "\\U%08x", static_cast<unsigned>(code_point));
          }
          out += buffer;
        } else {
          out.push_back('\\');
          out.push_back(c);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, std::string_view origin)
      : source_(std::move(source)), origin_(origin) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    while (pos < source_.size()) {
      const size_t tag = FindTagStart(pos);
      if (tag == std::string::npos) {
        EmitData(pos, source_.size() - pos);
        break;
      }
      const char opener = source_[tag + 1];
      size_t after = tag + 2;
      char sign = 0;
      if (after < source_.size() && (source_[after] == '-' || source_[after] == '+')) {
        sign = source_[after];
      }
      size_t raw_end = 0;
      const bool raw = opener == '%' && MatchRawBegin(tag, &raw_end);
      EmitStrippedData(pos, tag - pos, sign, /*lstrip=*/opener != '{');
      if (raw) {
        line_starting_ = source_[raw_end - 1] == '\n';
        auto end = LexRaw(raw_end);
        if (!end.ok()) return end.status();
        pos = *end;
        continue;
      }
      pos = after + (sign != 0 ? 1 : 0);
      absl::StatusOr<size_t> end = opener == '#'   ? LexComment(pos, tag)
                                   : opener == '{' ? LexTag(pos, tag, /*block=*/false)
                                                   : LexTag(pos, tag, /*block=*/true);
      if (!end.ok()) return end.status();
      pos = *end;
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", 0, 0, LineAt(source_.size())});
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t pos) {
    // Positions only grow, so count newlines incrementally.
    if (pos < line_cursor_) {
      line_cursor_ = 0;
      line_ = 1;
    }
    line_ += static_cast<int>(std::count(source_.begin() + line_cursor_,
                                         source_.begin() + std::min(pos, source_.size()), '\n'));
    line_cursor_ = std::min(pos, source_.size());
    return line_;
  }

  absl::Status Error(size_t pos, std::string_view what) {
    return absl::InvalidArgumentError(StrCat(origin_, ":", LineAt(pos), ": ", what));
  }

  size_t FindTagStart(size_t pos) const {
    for (size_t i = source_.find('{', pos); i != std::string::npos; i = source_.find('{', i + 1)) {
      if (i + 1 < source_.size() &&
          (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // `{%(-|+|)\s*raw\s*(-%}\s*|%})` at `pos`.
  bool MatchRawBegin(size_t pos, size_t* end) const {
    size_t i = pos + 2;
    if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) ++i;
    i = SkipWhitespace(source_, i);
    if (source_.compare(i, 3, "raw") != 0) return false;
    i = SkipWhitespace(source_, i + 3);
    if (source_.compare(i, 3, "-%}") == 0) {
      *end = SkipWhitespace(source_, i + 3);
      return true;
    }
    if (source_.compare(i, 2, "%}") == 0) {
      *end = i + 2;
      return true;
    }
    return false;
  }

  void EmitData(size_t pos, size_t length) {
    if (length == 0) return;
    tokens_.push_back(Token{TokenKind::kData, source_.substr(pos, length), 0, 0, LineAt(pos)});
  }

  // The text before a tag, after the tag's `-` (strip all whitespace before it) or, for blocks
  // and comments without `+`, lstrip_blocks (strip spaces between the line start and the tag).
  void EmitStrippedData(size_t pos, size_t length, char sign, bool lstrip) {
    std::string_view text(source_.data() + pos, length);
    if (sign == '-') {
      length = RstripLength(text);
    } else if (sign != '+' && lstrip) {
      const size_t newline = text.rfind('\n');
      const size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
      if ((line_start > 0 || line_starting_) && line_start < text.size() &&
          AllWhitespace(text.substr(line_start))) {
        length = line_start;
      }
    }
    EmitData(pos, length);
  }

  absl::StatusOr<size_t> LexRaw(size_t pos) {
    for (size_t i = source_.find("{%", pos); i != std::string::npos;
         i = source_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < source_.size() && (source_[p] == '-' || source_[p] == '+')) sign = source_[p++];
      p = SkipWhitespace(source_, p);
      if (source_.compare(p, 6, "endraw") != 0) continue;
      p = SkipWhitespace(source_, p + 6);
      size_t end = 0;
      if (source_.compare(p, 3, "+%}") == 0) {
        end = p + 3;
      } else if (source_.compare(p, 3, "-%}") == 0) {
        end = SkipWhitespace(source_, p + 3);
      } else if (source_.compare(p, 2, "%}") == 0) {
        end = p + 2;
        if (end < source_.size() && source_[end] == '\n') ++end;
      } else {
        continue;
      }
      EmitStrippedData(pos, i - pos, sign, /*lstrip=*/true);
      line_starting_ = source_[end - 1] == '\n';
      return end;
    }
    return Error(pos, "Missing end of raw directive");
  }

  absl::StatusOr<size_t> LexComment(size_t pos, size_t tag) {
    const size_t close = source_.find("#}", pos);
    if (close == std::string::npos) return Error(tag, "Missing end of comment tag");
    size_t end = close + 2;
    const char sign = close > pos ? source_[close - 1] : 0;
    if (sign == '-') {
      end = SkipWhitespace(source_, end);
    } else if (sign != '+' && end < source_.size() && source_[end] == '\n') {
      ++end;
    }
    line_starting_ = source_[end - 1] == '\n';
    return end;
  }

  // The end of a tag at `pos` when it is one: `-}}\s*` / `}}`, or `+%}` / `-%}\s*` / `%}\n?`.
  size_t MatchTagEnd(size_t pos, bool block) const {
    const char close = block ? '%' : '}';
    if (source_.compare(pos, 1, "-") == 0 && pos + 2 < source_.size() &&
        source_[pos + 1] == close && source_[pos + 2] == '}') {
      return SkipWhitespace(source_, pos + 3);
    }
    if (block && source_.compare(pos, 3, "+%}") == 0) return pos + 3;
    if (pos + 1 < source_.size() && source_[pos] == close && source_[pos + 1] == '}') {
      size_t end = pos + 2;
      if (block && end < source_.size() && source_[end] == '\n') ++end;
      return end;
    }
    return 0;
  }

  absl::StatusOr<size_t> LexTag(size_t pos, size_t tag, bool block) {
    tokens_.push_back(Token{block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin,
                            block ? "{%" : "{{", 0, 0, LineAt(tag)});
    std::vector<char> balancing;
    while (true) {
      if (pos >= source_.size()) {
        return Error(pos, block ? "unexpected end of template, expected end of statement block"
                                : "unexpected end of template, expected end of print statement");
      }
      if (balancing.empty()) {
        if (const size_t end = MatchTagEnd(pos, block); end > 0) {
          tokens_.push_back(Token{block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd,
                                  block ? "%}" : "}}", 0, 0, LineAt(pos)});
          line_starting_ = source_[end - 1] == '\n';
          return end;
        }
      }
      if (const size_t length = WhitespaceLengthAt(source_, pos); length > 0) {
        pos = SkipWhitespace(source_, pos);
        continue;
      }
      const int line = LineAt(pos);
      if (const size_t length = MatchFloat(source_, pos); length > 0) {
        std::string digits = source_.substr(pos, length);
        digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
        tokens_.push_back(
            Token{TokenKind::kFloat, digits, 0, std::strtod(digits.c_str(), nullptr), line});
        pos += length;
        continue;
      }
      if (const size_t length = MatchInteger(source_, pos); length > 0) {
        std::string digits = source_.substr(pos, length);
        digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
        int base = 10;
        size_t skip = 0;
        if (digits.size() > 1 && digits[0] == '0' && absl::ascii_isalpha(digits[1])) {
          const char prefix = absl::ascii_tolower(digits[1]);
          base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
          skip = 2;
        }
        errno = 0;
        const unsigned long long value = std::strtoull(digits.c_str() + skip, nullptr, base);
        if (errno == ERANGE || value > static_cast<unsigned long long>(INT64_MAX)) {
          return Error(
              pos, StrCat("integer literal ", digits, " is outside the supported 64-bit range"));
        }
        tokens_.push_back(Token{TokenKind::kInteger, digits, static_cast<int64_t>(value), 0, line});
        pos += length;
        continue;
      }
      if (IsNameStart(source_[pos])) {
        size_t end = pos + 1;
        while (end < source_.size() && IsNameChar(source_[end])) ++end;
        tokens_.push_back(Token{TokenKind::kName, source_.substr(pos, end - pos), 0, 0, line});
        pos = end;
        continue;
      }
      if (source_[pos] == '\'' || source_[pos] == '"') {
        if (const size_t length = MatchString(source_, pos); length > 0) {
          auto value = UnescapeString(std::string_view(source_).substr(pos + 1, length - 2));
          if (!value.ok()) return Error(pos, std::string(value.status().message()));
          tokens_.push_back(Token{TokenKind::kString, std::move(*value), 0, 0, line});
          pos += length;
          continue;
        }
      }
      static constexpr std::string_view kTwoCharOperators[] = {"**", "//", "==", "!=", ">=", "<="};
      std::string op;
      for (std::string_view candidate : kTwoCharOperators) {
        if (source_.compare(pos, 2, candidate) == 0) op = candidate;
      }
      if (op.empty() &&
          std::string_view("+-/*%~[](){}><=.:|,;").find(source_[pos]) != std::string_view::npos) {
        op = source_.substr(pos, 1);
      }
      if (op.empty()) {
        size_t length = 0;
        std::string character;
        AppendUtf8(CodePointAt(source_, pos, &length), character);
        return Error(pos, StrCat("unexpected char '", character, "'"));
      }
      if (op == "(" || op == "[" || op == "{") {
        balancing.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balancing.empty()) return Error(pos, StrCat("unexpected '", op, "'"));
        if (balancing.back() != op[0]) {
          return Error(pos, StrCat("unexpected '", op, "', expected '",
                                   std::string(1, balancing.back()), "'"));
        }
        balancing.pop_back();
      }
      tokens_.push_back(Token{TokenKind::kOperator, op, 0, 0, line});
      pos += op.size();
    }
  }

  std::string source_;
  std::string_view origin_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;
  size_t line_cursor_ = 0;
  int line_ = 1;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, std::string_view origin) {
  return Lexer(NormalizeNewlines(source), origin).Run();
}

}  // namespace attnserve::jinja
