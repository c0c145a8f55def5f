#include "text/structured/gbnf_to_lark.h"

#include <cstdint>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "text/tokenizer/unicode.h"

namespace attnserve::structured {
namespace {

constexpr int kMaxNesting = 100;  // parentheses; deeper is refused, not recursed into

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_'; }

class Translator {
 public:
  explicit Translator(std::string_view src) : src_(src) {}

  absl::StatusOr<std::string> Run() {
    SkipSpace(true);
    while (pos_ < src_.size()) {
      if (absl::Status rule = Rule(); !rule.ok()) return rule;
    }
    if (!defined_.contains("root")) return Error("the grammar defines no `root` rule");
    for (const auto& [name, lark] : names_) {
      if (!defined_.contains(name))
        return Error(absl::StrCat("rule `", name, "` is used but not defined"));
    }
    std::string out = absl::StrCat("start: ", LarkName("root"), "\n");
    for (const auto& [name, body] : defined_)
      absl::StrAppend(&out, LarkName(name), ": ", body, "\n");
    return out;
  }

 private:
  absl::Status Error(absl::string_view message) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("the GBNF grammar is not valid at line ", line,
                                                   ", column ", column, ": ", message));
  }

  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }

  // Spaces, tabs and comments; newlines too where a rule may go on.
  void SkipSpace(bool newlines) {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n' && src_[pos_] != '\r') ++pos_;
      } else {
        return;
      }
    }
  }

  std::string Name() {
    const size_t begin = pos_;
    while (pos_ < src_.size() && IsNameChar(src_[pos_])) ++pos_;
    return std::string(src_.substr(begin, pos_ - begin));
  }

  // A Lark rule name for a GBNF one: lower case, unique, in order of first use.
  std::string LarkName(const std::string& name) {
    auto [it, added] = names_.try_emplace(name);
    if (added) {
      std::string lower = absl::AsciiStrToLower(name);
      for (char& c : lower) c = c == '-' ? '_' : c;
      it->second = absl::StrCat("g", names_.size(), "_", lower);
    }
    return it->second;
  }

  absl::Status Rule() {
    const std::string name = Name();
    if (name.empty()) return Error("expected a rule name");
    LarkName(name);
    SkipSpace(false);
    if (src_.substr(pos_, 3) != "::=") return Error("expected `::=` after the rule name");
    pos_ += 3;
    SkipSpace(true);
    absl::StatusOr<std::string> body = Alternatives(0);
    if (!body.ok()) return body.status();
    if (Peek() == '\r')
      pos_ += Peek(1) == '\n' ? 2 : 1;
    else if (Peek() == '\n')
      ++pos_;
    else if (pos_ < src_.size())
      return Error(absl::StrCat("unexpected `", std::string(1, Peek()), "`"));
    defined_[name] = *std::move(body);
    SkipSpace(true);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Alternatives(int depth) {
    std::vector<std::string> alternatives;
    absl::StatusOr<std::string> sequence = Sequence(depth);
    if (!sequence.ok()) return sequence;
    alternatives.push_back(*std::move(sequence));
    while (Peek() == '|') {
      ++pos_;
      SkipSpace(true);
      sequence = Sequence(depth);
      if (!sequence.ok()) return sequence;
      alternatives.push_back(*std::move(sequence));
    }
    return absl::StrJoin(alternatives, " | ");
  }

  absl::StatusOr<std::string> Sequence(int depth) {
    const bool nested = depth > 0;
    std::vector<std::string> items;
    bool repeated = false;  // the last item carries an operator already
    while (pos_ < src_.size()) {
      const char c = Peek();
      absl::StatusOr<std::string> item;
      if (c == '"') {
        item = Literal();
      } else if (c == '[') {
        item = CharacterClass();
      } else if (IsNameChar(c)) {
        item = LarkName(Name());
      } else if (c == '(') {
        if (depth >= kMaxNesting)
          return Error(absl::StrCat("groups nest deeper than ", kMaxNesting));
        ++pos_;
        SkipSpace(true);
        item = Alternatives(depth + 1);
        if (!item.ok()) return item;
        if (Peek() != ')') return Error("expected `)`");
        ++pos_;
        item = absl::StrCat("(", *item, ")");
      } else if (c == '.') {
        ++pos_;
        item = std::string("/(?s:.)/");
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) return Error(absl::StrCat("`", std::string(1, c), "` follows nothing"));
        absl::StatusOr<std::string> op = Repetition();
        if (!op.ok()) return op;
        std::string& last = items.back();
        if (op->empty()) {
          last = "\"\"";  // repeated zero times
        } else {
          if (repeated) last = absl::StrCat("(", last, ")");
          last += *op;
        }
        repeated = true;
        SkipSpace(nested);
        continue;
      } else {
        break;
      }
      if (!item.ok()) return item;
      items.push_back(*std::move(item));
      repeated = false;
      SkipSpace(nested);
    }
    if (items.empty()) return std::string("\"\"");
    return absl::StrJoin(items, " ");
  }

  // `*`, `+`, `?` or `{m}`, `{m,}`, `{m,n}`, `{,n}` as Lark writes it; empty for zero times.
  absl::StatusOr<std::string> Repetition() {
    const char c = src_[pos_++];
    if (c != '{') return std::string(1, c);
    SkipSpace(true);
    const auto number = [&]() -> absl::StatusOr<int64_t> {
      int64_t value = 0;
      const size_t begin = pos_;
      while (absl::ascii_isdigit(Peek())) {
        value = value * 10 + (src_[pos_++] - '0');
        if (value > 1'000'000) return Error("a repetition count above 1000000");
      }
      if (pos_ == begin) return -1;
      SkipSpace(true);
      return value;
    };
    absl::StatusOr<int64_t> low = number();
    if (!low.ok()) return low.status();
    int64_t high = *low;
    if (Peek() == ',') {
      ++pos_;
      SkipSpace(true);
      absl::StatusOr<int64_t> upper = number();
      if (!upper.ok()) return upper.status();
      high = *upper;
    } else if (*low < 0) {
      return Error("expected a number in `{}`");
    }
    if (Peek() != '}') return Error("expected `}`");
    ++pos_;
    const int64_t min = std::max<int64_t>(*low, 0);
    if (high >= 0 && high < min) return Error("a repetition's maximum is below its minimum");
    if (high == 0) return std::string();
    if (high < 0) return absl::StrCat("{", min, ",}");
    if (high == min) return absl::StrCat("{", min, "}");
    return absl::StrCat("{", min, ",", high, "}");
  }

  // One character of a literal or class, escapes read; -1 with an error set.
  absl::StatusOr<uint32_t> Character() {
    if (pos_ >= src_.size()) return Error("unexpected end of the grammar");
    const auto byte = static_cast<unsigned char>(src_[pos_]);
    if (byte != '\\') {
      const unicode::Decoded decoded = unicode::DecodeUtf8(src_.substr(pos_));
      if (!decoded.valid) return Error("invalid UTF-8");
      pos_ += decoded.bytes;
      return static_cast<uint32_t>(decoded.code_point);
    }
    const char kind = Peek(1);
    pos_ += 2;
    int digits = 0;
    switch (kind) {
      case 'x':
        digits = 2;
        break;
      case 'u':
        digits = 4;
        break;
      case 'U':
        digits = 8;
        break;
      case 't':
        return uint32_t{'\t'};
      case 'r':
        return uint32_t{'\r'};
      case 'n':
        return uint32_t{'\n'};
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
        return static_cast<uint32_t>(kind);
      default:
        pos_ -= 2;
        return Error(absl::StrCat("unknown escape `\\", std::string(1, kind), "`"));
    }
    uint32_t code = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = Peek();
      if (!absl::ascii_isxdigit(h)) return Error("expected a hexadecimal digit");
      code = code * 16 + static_cast<uint32_t>(
                             absl::ascii_isdigit(h) ? h - '0' : absl::ascii_tolower(h) - 'a' + 10);
      ++pos_;
    }
    if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
      return Error("not a Unicode character");
    return code;
  }

  absl::StatusOr<std::string> Literal() {
    ++pos_;  // "
    std::string text;
    while (Peek() != '"') {
      if (pos_ >= src_.size()) return Error("a string literal is not closed");
      absl::StatusOr<uint32_t> c = Character();
      if (!c.ok()) return c.status();
      unicode::AppendUtf8(*c, text);
    }
    ++pos_;
    if (text.empty()) return std::string("\"\"");
    return nlohmann::json(text).dump();
  }

  absl::StatusOr<std::string> CharacterClass() {
    ++pos_;  // [
    std::string regex = "[";
    if (Peek() == '^') {
      ++pos_;
      regex += '^';
    }
    bool any = false;
    while (Peek() != ']') {
      if (pos_ >= src_.size()) return Error("a character class is not closed");
      absl::StatusOr<uint32_t> first = Character();
      if (!first.ok()) return first.status();
      absl::StrAppend(&regex, absl::StrFormat("\\x{%X}", *first));
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < src_.size()) {
        ++pos_;
        absl::StatusOr<uint32_t> last = Character();
        if (!last.ok()) return last.status();
        if (*last < *first) return Error("a character range runs backwards");
        absl::StrAppend(&regex, absl::StrFormat("-\\x{%X}", *last));
      }
      any = true;
    }
    ++pos_;
    if (!any) return Error("an empty character class");
    return absl::StrCat("/", regex, "]/");
  }

  std::string_view src_;
  size_t pos_ = 0;
  std::map<std::string, std::string> names_;    // GBNF name → Lark name
  std::map<std::string, std::string> defined_;  // GBNF name → Lark body (a later one wins)
};

}  // namespace

absl::StatusOr<std::string> GbnfToLark(std::string_view gbnf) { return Translator(gbnf).Run(); }

}  // namespace attnserve::structured
