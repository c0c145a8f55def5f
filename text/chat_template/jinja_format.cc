#include "text/chat_template/jinja_format.h"

#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/chat_template/jinja_text.h"

namespace attnserve::jinja {
namespace {

// Widths and precisions beyond this are refused rather than allocated.
constexpr int64_t kMaxWidth = 1 << 16;

struct Spec {
  char32_t fill = ' ';
  char align = 0;  // < > ^ =, or 0 for the type's default
  char sign = '-';
  bool zero = false;
  int64_t width = -1;
  int64_t precision = -1;
  char type = 0;
};

absl::StatusOr<Spec> ParseSpec(std::string_view text) {
  Spec spec;
  std::u32string chars = DecodeUtf8(text);
  size_t i = 0;
  const auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (chars.size() >= 2 && is_align(chars[1])) {
    spec.fill = chars[0];
    spec.align = static_cast<char>(chars[1]);
    i = 2;
  } else if (!chars.empty() && is_align(chars[0])) {
    spec.align = static_cast<char>(chars[0]);
    i = 1;
  }
  if (i < chars.size() && (chars[i] == '+' || chars[i] == '-' || chars[i] == ' ')) {
    spec.sign = static_cast<char>(chars[i++]);
  }
  if (i < chars.size() && chars[i] == '0') {
    spec.zero = true;
    ++i;
  }
  const auto number = [&]() -> int64_t {
    int64_t value = 0;
    bool any = false;
    while (i < chars.size() && chars[i] >= '0' && chars[i] <= '9' && value <= kMaxWidth) {
      value = value * 10 + (chars[i++] - '0');
      any = true;
    }
    return any ? value : -1;
  };
  spec.width = number();
  if (i < chars.size() && chars[i] == '.') {
    ++i;
    spec.precision = number();
    if (spec.precision < 0) return absl::InvalidArgumentError("Format specifier missing precision");
  }
  if (i < chars.size()) spec.type = static_cast<char>(chars[i++]);
  if (i != chars.size() || spec.width > kMaxWidth || spec.precision > kMaxWidth) {
    return absl::InvalidArgumentError(StrCat("unsupported format spec '", text, "'"));
  }
  return spec;
}

std::string Pad(std::string body, const Spec& spec, bool numeric) {
  const int64_t length = CodePointCount(body);
  if (spec.width <= length) return body;
  const int64_t padding = spec.width - length;
  char align = spec.align != 0 ? spec.align : (numeric ? '>' : '<');
  char32_t fill = spec.fill;
  if (spec.zero && spec.align == 0 && numeric) {
    align = '=';
    fill = '0';
  }
  std::string fill_text;
  AppendUtf8(fill, fill_text);
  std::string pad;
  const auto repeat = [&](int64_t n) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += fill_text;
    return out;
  };
  if (align == '<') return body + repeat(padding);
  if (align == '^') return repeat(padding / 2) + body + repeat(padding - padding / 2);
  if (align == '=' && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
    return body.substr(0, 1) + repeat(padding) + body.substr(1);
  }
  return repeat(padding) + body;
}

std::string SignPrefix(bool negative, char sign) {
  if (negative) return "-";
  if (sign == '+') return "+";
  if (sign == ' ') return " ";
  return "";
}

absl::StatusOr<std::string> FormatValue(const Value& value, const Spec& spec) {
  const char type = spec.type;
  if (type == 0 || type == 's') {
    if (type == 's' && !value.is_string()) {
      if (value.is_number()) {
        return absl::InvalidArgumentError("Unknown format code 's' for a number");
      }
    }
    if (value.is_string() || type == 's' || !value.is_number()) {
      std::string text = ToStr(value);
      if (spec.precision >= 0) {
        std::u32string chars = DecodeUtf8(text);
        if (static_cast<int64_t>(chars.size()) > spec.precision) {
          chars.resize(static_cast<size_t>(spec.precision));
        }
        text = EncodeUtf8(chars);
      }
      return Pad(std::move(text), spec, false);
    }
  }
  if (!value.is_number()) {
    return absl::InvalidArgumentError(StrCat("Unknown format code '", std::string(1, type),
                                             "' for object of type '", TypeName(value), "'"));
  }
  if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b' ||
      (type == 0 && value.is_integral())) {
    if (!value.is_integral()) {
      return absl::InvalidArgumentError(
          StrCat("Unknown format code '", std::string(1, type), "' for object of type 'float'"));
    }
    const int64_t number = value.int_value();
    uint64_t magnitude = number < 0 ? 0 - static_cast<uint64_t>(number) : number;
    std::string digits;
    const int base = type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
    const char* alphabet = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    do {
      digits.insert(digits.begin(), alphabet[magnitude % base]);
      magnitude /= base;
    } while (magnitude > 0);
    return Pad(SignPrefix(number < 0, spec.sign) + digits, spec, true);
  }
  const double number = value.number_value();
  std::string body;
  if (type == 0) {
    body = PythonFloatRepr(std::fabs(number));
  } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' ||
             type == 'G' || type == '%') {
    const int precision = spec.precision >= 0 ? static_cast<int>(spec.precision) : 6;
    const double shown = type == '%' ? std::fabs(number) * 100 : std::fabs(number);
    const char conversion = type == '%' ? 'f' : type;
    char pattern[8] = {'%', '.', '*', conversion, 0};
    std::vector<char> buffer(static_cast<size_t>(precision) + 400);
    std::snprintf(buffer.data(), buffer.size(), pattern, precision, shown);
    body = buffer.data();
    if (type == '%') body += "%";
  } else {
    return absl::InvalidArgumentError(
        StrCat("Unknown format code '", std::string(1, type), "' for object of type 'float'"));
  }
  return Pad(SignPrefix(std::signbit(number) && !std::isnan(number), spec.sign) + body, spec, true);
}

}  // namespace

absl::StatusOr<std::string> PythonReplace(FilterHost& host, std::string_view text,
                                          std::string_view old_text, std::string_view new_text,
                                          int64_t count) {
  if (old_text.empty()) {
    // Python inserts `new` before every character and at the end.
    const int64_t slots = CodePointCount(text) + 1;
    const int64_t insertions = count < 0 ? slots : std::min(count, slots);
    RETURN_IF_ERROR(host.CheckSize(text.size() + new_text.size() * insertions));
    std::string out;
    int64_t done = 0;
    size_t pos = 0;
    while (true) {
      if (done < insertions) {
        out += new_text;
        ++done;
      }
      if (pos >= text.size()) break;
      size_t length = 0;
      CodePointAt(text, pos, &length);
      out += text.substr(pos, length);
      pos += length;
    }
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(out.size() / 4)));
    return out;
  }
  int64_t occurrences = 0;
  for (size_t at = text.find(old_text);
       at != std::string_view::npos && (count < 0 || occurrences < count);
       at = text.find(old_text, at + old_text.size())) {
    ++occurrences;
  }
  const int64_t size =
      static_cast<int64_t>(text.size()) +
      occurrences * (static_cast<int64_t>(new_text.size()) - static_cast<int64_t>(old_text.size()));
  RETURN_IF_ERROR(host.CheckSize(static_cast<size_t>(size)));
  RETURN_IF_ERROR(host.Charge(size / 4 + static_cast<int64_t>(text.size()) / 16));
  std::string out;
  out.reserve(static_cast<size_t>(size));
  size_t start = 0;
  for (int64_t done = 0; done < occurrences; ++done) {
    const size_t at = text.find(old_text, start);
    out.append(text.substr(start, at - start));
    out.append(new_text);
    start = at + old_text.size();
  }
  out.append(text.substr(start));
  return out;
}

absl::StatusOr<std::string> PythonStrFormat(FilterHost& host, std::string_view format,
                                            const CallArgs& args) {
  std::string out;
  size_t automatic = 0;
  for (size_t i = 0; i < format.size();) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        i += 2;
        continue;
      }
      return absl::InvalidArgumentError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      ++i;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      i += 2;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError("Single '{' encountered in format string");
    }
    std::string_view field = format.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string_view::npos) {
      return absl::InvalidArgumentError("unsupported nested format field");
    }
    i = close + 1;
    std::string_view spec_text;
    if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec_text = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size()) return absl::InvalidArgumentError("invalid conversion");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    size_t name_end = 0;
    while (name_end < field.size() && field[name_end] != '.' && field[name_end] != '[') ++name_end;
    const std::string_view name = field.substr(0, name_end);
    Value value;
    if (name.empty() || absl::ascii_isdigit(name[0])) {
      size_t index = automatic++;
      if (!name.empty()) index = static_cast<size_t>(std::atoll(std::string(name).c_str()));
      if (index >= args.positional.size()) {
        return absl::InvalidArgumentError(
            StrCat("Replacement index ", index, " out of range for positional args tuple"));
      }
      value = args.positional[index];
    } else {
      bool found = false;
      for (const auto& [keyword, argument] : args.keywords) {
        if (keyword == name) {
          value = argument;
          found = true;
        }
      }
      if (!found) return absl::InvalidArgumentError(StrCat("'", name, "'"));
    }
    std::string_view rest = field.substr(name_end);
    while (!rest.empty()) {
      if (rest[0] == '.') {
        size_t end = 1;
        while (end < rest.size() && rest[end] != '.' && rest[end] != '[') ++end;
        ASSIGN_OR_RETURN(value, host.GetAttribute(value, rest.substr(1, end - 1)));
        rest = rest.substr(end);
      } else {
        const size_t end = rest.find(']');
        if (end == std::string_view::npos)
          return absl::InvalidArgumentError("Missing ']' in format string");
        const std::string key(rest.substr(1, end - 1));
        const bool numeric =
            !key.empty() && std::all_of(key.begin(), key.end(), absl::ascii_isdigit);
        ASSIGN_OR_RETURN(value, host.GetItem(value, numeric ? Value::Int(std::atoll(key.c_str()))
                                                            : Value::String(key)));
        rest = rest.substr(end + 1);
      }
    }
    if (conversion == 'r' || conversion == 'a') {
      value = Value::String(ToRepr(value));
    } else if (conversion == 's') {
      value = Value::String(ToStr(value));
    } else if (conversion != 0) {
      return absl::InvalidArgumentError("Unknown conversion specifier");
    }
    ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
    ASSIGN_OR_RETURN(std::string formatted, FormatValue(value, spec));
    out += formatted;
    RETURN_IF_ERROR(host.CheckSize(out.size()));
  }
  RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(out.size() / 4)));
  return out;
}

absl::StatusOr<std::string> PythonPercentFormat(FilterHost& host, std::string_view format,
                                                const Value& values) {
  std::vector<Value> positional;
  const bool mapping = values.is_dict();
  if (values.is_tuple()) {
    positional = values.items();
  } else {
    positional.push_back(values);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size();) {
    if (format[i] != '%') {
      out.push_back(format[i++]);
      continue;
    }
    ++i;
    if (i >= format.size()) return absl::InvalidArgumentError("incomplete format");
    if (format[i] == '%') {
      out.push_back('%');
      ++i;
      continue;
    }
    Value value;
    bool have_value = false;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string_view::npos)
        return absl::InvalidArgumentError("incomplete format key");
      if (!mapping) return absl::InvalidArgumentError("format requires a mapping");
      const Value* found = values.dict().Find(format.substr(i + 1, close - i - 1));
      if (found == nullptr) {
        return absl::InvalidArgumentError(StrCat("'", format.substr(i + 1, close - i - 1), "'"));
      }
      value = *found;
      have_value = used_mapping = true;
      i = close + 1;
    }
    Spec spec;
    while (i < format.size() &&
           std::string_view("-+ #0").find(format[i]) != std::string_view::npos) {
      if (format[i] == '-') spec.align = '<';
      if (format[i] == '+' || format[i] == ' ') spec.sign = format[i];
      if (format[i] == '0') spec.zero = true;
      ++i;
    }
    int64_t width = -1;
    while (i < format.size() && absl::ascii_isdigit(format[i]) && width < kMaxWidth) {
      width = std::max<int64_t>(width, 0) * 10 + (format[i++] - '0');
    }
    spec.width = width > kMaxWidth ? kMaxWidth : width;
    if (i < format.size() && format[i] == '.') {
      ++i;
      int64_t precision = 0;
      while (i < format.size() && absl::ascii_isdigit(format[i]) && precision < kMaxWidth) {
        precision = precision * 10 + (format[i++] - '0');
      }
      spec.precision = precision;
    }
    if (i >= format.size()) return absl::InvalidArgumentError("incomplete format");
    const char type = format[i++];
    if (!have_value) {
      if (next >= positional.size()) {
        return absl::InvalidArgumentError("not enough arguments for format string");
      }
      value = positional[next++];
    }
    if (spec.align == '<') spec.zero = false;
    switch (type) {
      case 's':
      case 'r':
      case 'a':
        spec.type = 0;
        value = Value::String(type == 's' ? ToStr(value) : ToRepr(value));
        break;
      case 'd':
      case 'i':
      case 'u':
        if (!value.is_number()) {
          return absl::InvalidArgumentError(StrCat("%", std::string(1, type),
                                                   " format: a real number is required, not ",
                                                   TypeName(value)));
        }
        if (value.is_float()) {
          const double truncated = std::trunc(value.number_value());
          if (!(std::fabs(truncated) < 9.2e18))
            return absl::InvalidArgumentError("integer overflow");
          value = Value::Int(static_cast<int64_t>(truncated));
        }
        spec.type = 'd';
        break;
      case 'x':
      case 'X':
      case 'o':
        if (!value.is_integral()) {
          return absl::InvalidArgumentError(StrCat(
              "%", std::string(1, type), " format: an integer is required, not ", TypeName(value)));
        }
        spec.type = type;
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!value.is_number()) {
          return absl::InvalidArgumentError(StrCat("must be real number, not ", TypeName(value)));
        }
        value = Value::Float(value.number_value());
        spec.type = type;
        break;
      default:
        return absl::InvalidArgumentError(
            StrCat("unsupported format character '", std::string(1, type), "'"));
    }
    ASSIGN_OR_RETURN(std::string formatted, FormatValue(value, spec));
    out += formatted;
    RETURN_IF_ERROR(host.CheckSize(out.size()));
  }
  if (!used_mapping && !mapping && next < positional.size()) {
    return absl::InvalidArgumentError("not all arguments converted during string formatting");
  }
  RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(out.size() / 4)));
  return out;
}

}  // namespace attnserve::jinja
