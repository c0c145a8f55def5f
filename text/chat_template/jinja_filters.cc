#include "text/chat_template/jinja_filters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "text/chat_template/jinja_format.h"
#include "text/chat_template/jinja_methods.h"
#include "text/chat_template/jinja_text.h"

namespace attnserve::jinja {

const Value* CallArgs::Find(size_t index, std::string_view keyword) const {
  if (index < positional.size()) return &positional[index];
  if (!keyword.empty()) {
    for (const auto& [name, value] : keywords) {
      if (name == keyword) return &value;
    }
  }
  return nullptr;
}

absl::Status CallArgs::Check(std::string_view function, size_t max_positional,
                             std::initializer_list<std::string_view> allowed) const {
  if (positional.size() > max_positional) {
    return absl::InvalidArgumentError(StrCat(function, "() takes at most ", max_positional,
                                             " positional arguments (", positional.size(),
                                             " given)"));
  }
  for (const auto& [name, value] : keywords) {
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      return absl::InvalidArgumentError(
          StrCat(function, "() got an unexpected keyword argument '", name, "'"));
    }
  }
  return absl::OkStatus();
}

namespace {

using Names = std::set<std::string, std::less<>>;

const Names& FilterNames() {
  static const Names names = {
      "abs",      "attr",   "capitalize", "center",     "count",      "d",       "default",
      "dictsort", "e",      "escape",     "first",      "float",      "format",  "indent",
      "int",      "items",  "join",       "last",       "length",     "list",    "lower",
      "map",      "max",    "min",        "reject",     "rejectattr", "replace", "reverse",
      "round",    "safe",   "select",     "selectattr", "sort",       "string",  "sum",
      "title",    "tojson", "trim",       "truncate",   "unique",     "upper",   "wordcount"};
  return names;
}

const Names& TestNames() {
  static const Names names = {
      "boolean", "callable",  "defined", "divisibleby", "eq",          "equalto",  "escaped",
      "even",    "false",     "float",   "ge",          "greaterthan", "gt",       "in",
      "integer", "iterable",  "le",      "lessthan",    "lower",       "lt",       "mapping",
      "ne",      "none",      "number",  "odd",         "sameas",      "sequence", "string",
      "true",    "undefined", "upper"};
  return names;
}

absl::Status UndefinedError(const Value& undefined) {
  const std::string& message = undefined.undefined_message();
  return absl::InvalidArgumentError(message.empty() ? "'undefined' is undefined" : message);
}

Value ArgOr(const CallArgs& args, size_t index, std::string_view keyword, Value fallback) {
  const Value* value = args.Find(index, keyword);
  return value ? *value : std::move(fallback);
}

absl::StatusOr<Value> Length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(CodePointCount(value.string_value()));
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return Value::Int(static_cast<int64_t>(value.items().size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(value.dict().entries.size()));
    default:
      return absl::InvalidArgumentError(
          StrCat("object of type '", TypeName(value), "' has no len()"));
  }
}

// jinja2's make_attrgetter: "a.b.0" looked up part by part with getitem semantics.
absl::StatusOr<Value> LookupAttribute(FilterHost& host, Value item, const Value& attribute,
                                      const Value* fallback) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (absl::string_view part : absl::StrSplit(attribute.string_value(), '.')) {
      int64_t index = 0;
      if (!part.empty() && std::all_of(part.begin(), part.end(), absl::ascii_isdigit) &&
          absl::SimpleAtoi(part, &index)) {
        parts.push_back(Value::Int(index));
      } else {
        parts.push_back(Value::String(std::string(part)));
      }
    }
  } else {
    parts.push_back(attribute);
  }
  for (const Value& part : parts) {
    ASSIGN_OR_RETURN(item, host.GetItem(item, part));
    if (fallback != nullptr && !fallback->is_none() && item.is_undefined()) item = *fallback;
  }
  return item;
}

Value IgnoreCase(const Value& value) {
  return value.is_string() ? Value::String(PythonLower(value.string_value())) : value;
}

// Python's sorted(items, key=keys) (stable; reverse keeps the order of equal items).
absl::Status SortByKeys(std::vector<Value>& items, std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status status;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!status.ok()) return false;
    absl::StatusOr<bool> less = reverse ? LessThan(keys[b], keys[a]) : LessThan(keys[a], keys[b]);
    if (!less.ok()) {
      status = less.status();
      return false;
    }
    return *less;
  });
  RETURN_IF_ERROR(status);
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
  return absl::OkStatus();
}

// Python's round(x, ndigits) for a float: correctly rounded, half to even.
double RoundFloat(double value, int64_t digits) {
  if (!std::isfinite(value)) return value;
  if (digits >= 0 && digits <= 300) {
    char buffer[512];
    std::snprintf(buffer, sizeof buffer, "%.*f", static_cast<int>(digits), value);
    return std::strtod(buffer, nullptr);
  }
  if (digits > 300) return value;
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(value / scale) * scale;
}

// Python's int(text, base) for the int filter.
std::optional<int64_t> ParsePythonInt(std::string text, int base) {
  text = std::string(absl::StripAsciiWhitespace(text));
  if (text.empty()) return std::nullopt;
  std::string digits;
  size_t i = 0;
  if (text[0] == '+' || text[0] == '-') digits.push_back(text[i++]);
  if (base == 16 && text.size() > i + 1 && text[i] == '0' &&
      (text[i + 1] == 'x' || text[i + 1] == 'X'))
    i += 2;
  if (i >= text.size()) return std::nullopt;
  for (; i < text.size(); ++i) {
    if (text[i] == '_' && i + 1 < text.size() && text[i + 1] != '_' && !digits.empty() &&
        digits.back() != '-' && digits.back() != '+') {
      continue;
    }
    if (!absl::ascii_isalnum(text[i])) return std::nullopt;
    digits.push_back(text[i]);
  }
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || end == nullptr || *end != '\0') return std::nullopt;
  return value;
}

// Python's float(text).
std::optional<double> ParsePythonFloat(std::string_view text) {
  std::string trimmed(PythonStrip(text, nullptr, true, true));
  trimmed.erase(std::remove(trimmed.begin(), trimmed.end(), '_'), trimmed.end());
  if (trimmed.empty()) return std::nullopt;
  const std::string lower = absl::AsciiStrToLower(trimmed);
  const std::string_view unsigned_part =
      (lower[0] == '+' || lower[0] == '-') ? std::string_view(lower).substr(1) : lower;
  if (unsigned_part == "inf" || unsigned_part == "infinity" || unsigned_part == "nan") {
    const double magnitude = unsigned_part == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -magnitude : magnitude;
  }
  if (unsigned_part.find_first_not_of("0123456789.e+-") != std::string_view::npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double value = std::strtod(trimmed.c_str(), &end);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return value;
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<Value> Tojson(FilterHost& host, const Value& operand, const CallArgs& args) {
  RETURN_IF_ERROR(args.Check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions options;
  const Value ensure_ascii = ArgOr(args, 0, "ensure_ascii", Value::Bool(false));
  options.ensure_ascii = Truthy(ensure_ascii);
  const Value indent = ArgOr(args, 1, "indent", Value::None());
  if (indent.is_string()) {
    options.indent = indent.string_value();
  } else if (indent.is_integral()) {
    const int64_t width = indent.int_value();
    RETURN_IF_ERROR(host.CheckSize(static_cast<size_t>(std::max<int64_t>(width, 0))));
    options.indent = std::string(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  } else if (!indent.is_none()) {
    return absl::InvalidArgumentError(
        StrCat("tojson: indent must be an int or a str, not ", TypeName(indent)));
  }
  if (options.indent) options.item_separator.erase(1);  // "," (json.dumps with indent)
  const Value separators = ArgOr(args, 2, "separators", Value::None());
  if (!separators.is_none()) {
    if (!separators.is_sequence() || separators.items().size() != 2 ||
        !separators.items()[0].is_string() || !separators.items()[1].is_string()) {
      return absl::InvalidArgumentError("tojson: separators must be a pair of strings");
    }
    options.item_separator = separators.items()[0].string_value();
    options.key_separator = separators.items()[1].string_value();
  }
  options.sort_keys = Truthy(ArgOr(args, 3, "sort_keys", Value::Bool(false)));
  options.max_bytes = host.MaxBytes();
  ASSIGN_OR_RETURN(std::string json, ToJson(operand, options));
  RETURN_IF_ERROR(host.CheckSize(json.size()));
  RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(json.size() / 4)));
  return Value::String(std::move(json));
}

absl::StatusOr<Value> Indent(FilterHost& host, const Value& operand, const CallArgs& args) {
  RETURN_IF_ERROR(args.Check("indent", 3, {"width", "first", "blank"}));
  if (!operand.is_string()) {
    if (operand.is_undefined()) return UndefinedError(operand);
    return absl::InvalidArgumentError(
        StrCat("unsupported operand type(s) for +=: '", TypeName(operand), "' and 'str'"));
  }
  const Value width = ArgOr(args, 0, "width", Value::Int(4));
  std::string indentation;
  if (width.is_string()) {
    indentation = width.string_value();
  } else if (width.is_integral()) {
    const int64_t count = std::max<int64_t>(width.int_value(), 0);
    RETURN_IF_ERROR(host.CheckSize(static_cast<size_t>(count)));
    indentation = std::string(static_cast<size_t>(count), ' ');
  } else {
    return absl::InvalidArgumentError("indent: width must be an int or a str");
  }
  const bool first = Truthy(ArgOr(args, 1, "first", Value::Bool(false)));
  const bool blank = Truthy(ArgOr(args, 2, "blank", Value::Bool(false)));
  const std::vector<std::string> lines = PythonSplitLines(operand.string_value() + "\n", false);
  RETURN_IF_ERROR(
      host.CheckSize(operand.string_value().size() + lines.size() * indentation.size()));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += indentation;
    }
    out += lines[i];
  }
  if (first) out = indentation + out;
  RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(out.size() / 4)));
  return Value::String(std::move(out));
}

absl::StatusOr<Value> SelectOrReject(FilterHost& host, const Value& operand, const CallArgs& args,
                                     bool select, bool by_attribute) {
  // jinja2 iterates only a truthy value: none (or "", 0, []) gives nothing.
  if (!Truthy(operand)) return Value::List({});
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
  RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
  size_t offset = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) {
      return absl::InvalidArgumentError("Missing parameter for attribute name");
    }
    attribute = args.positional[0];
    offset = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > offset) {
    if (!args.positional[offset].is_string()) {
      return absl::InvalidArgumentError("the test name must be a string");
    }
    test = args.positional[offset].string_value();
    if (!IsKnownTest(*test))
      return absl::InvalidArgumentError(StrCat("No test named '", *test, "'."));
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(offset) + 1,
                                args.positional.end());
    test_args.keywords = args.keywords;
  }
  std::vector<Value> kept;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attribute) {
      ASSIGN_OR_RETURN(subject, LookupAttribute(host, item, attribute, nullptr));
    }
    bool passed = false;
    if (test) {
      ASSIGN_OR_RETURN(passed, host.Test(*test, subject, test_args));
    } else {
      passed = Truthy(subject);
    }
    if (passed == select) kept.push_back(item);
  }
  return Value::List(std::move(kept));
}

absl::StatusOr<Value> MinOrMax(FilterHost& host, const Value& operand, const CallArgs& args,
                               bool max) {
  RETURN_IF_ERROR(args.Check(max ? "max" : "min", 2, {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
  const bool case_sensitive = Truthy(ArgOr(args, 0, "case_sensitive", Value::Bool(false)));
  const Value attribute = ArgOr(args, 1, "attribute", Value::None());
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value key = item;
    if (!attribute.is_none()) {
      ASSIGN_OR_RETURN(key, LookupAttribute(host, item, attribute, nullptr));
    }
    keys.push_back(case_sensitive ? key : IgnoreCase(key));
  }
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(bool better,
                     max ? LessThan(keys[best], keys[i]) : LessThan(keys[i], keys[best]));
    if (better) best = i;
  }
  return items[best];
}

absl::StatusOr<Value> Sum(FilterHost& host, const Value& operand, const CallArgs& args) {
  RETURN_IF_ERROR(args.Check("sum", 2, {"attribute", "start"}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
  RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
  const Value attribute = ArgOr(args, 0, "attribute", Value::None());
  Value total = ArgOr(args, 1, "start", Value::Int(0));
  for (const Value& item : items) {
    Value term = item;
    if (!attribute.is_none()) {
      ASSIGN_OR_RETURN(term, LookupAttribute(host, item, attribute, nullptr));
    }
    if (!total.is_number() || !term.is_number()) {
      return absl::InvalidArgumentError(StrCat("unsupported operand type(s) for +: '",
                                               TypeName(total), "' and '", TypeName(term), "'"));
    }
    if (total.is_float() || term.is_float()) {
      total = Value::Float(total.number_value() + term.number_value());
    } else {
      int64_t result = 0;
      if (__builtin_add_overflow(total.int_value(), term.int_value(), &result)) {
        return absl::InvalidArgumentError("integer overflow (outside the 64-bit range)");
      }
      total = Value::Int(result);
    }
  }
  return total;
}

absl::StatusOr<Value> Truncate(FilterHost& host, const Value& operand, const CallArgs& args) {
  RETURN_IF_ERROR(args.Check("truncate", 4, {"length", "killwords", "end", "leeway"}));
  (void)host;
  const std::u32string text = DecodeUtf8(ToStr(operand));
  const Value length_value = ArgOr(args, 0, "length", Value::Int(255));
  const bool killwords = Truthy(ArgOr(args, 1, "killwords", Value::Bool(false)));
  const Value end_value = ArgOr(args, 2, "end", Value::String("..."));
  const Value leeway_value = ArgOr(args, 3, "leeway", Value::Int(5));
  if (!length_value.is_integral() || !end_value.is_string() || !leeway_value.is_integral()) {
    return absl::InvalidArgumentError("truncate: bad argument types");
  }
  const std::u32string end = DecodeUtf8(end_value.string_value());
  const int64_t length = length_value.int_value();
  if (length < static_cast<int64_t>(end.size())) {
    return absl::InvalidArgumentError(StrCat("expected length >= ", end.size(), ", got ", length));
  }
  if (leeway_value.int_value() < 0) return absl::InvalidArgumentError("expected leeway >= 0");
  if (static_cast<int64_t>(text.size()) <= length + leeway_value.int_value()) {
    return Value::String(EncodeUtf8(text));
  }
  std::u32string head = text.substr(0, static_cast<size_t>(length) - end.size());
  if (!killwords) {
    const size_t space = head.rfind(U' ');
    if (space != std::u32string::npos) head.resize(space);
  }
  return Value::String(EncodeUtf8(head + end));
}

absl::StatusOr<Value> ApplyFilterImpl(FilterHost& host, std::string_view name, const Value& operand,
                                      const CallArgs& args) {
  if (name == "tojson") return Tojson(host, operand, args);
  if (name == "length" || name == "count") return Length(operand);
  if (name == "default" || name == "d") {
    RETURN_IF_ERROR(args.Check(name, 2, {"default_value", "boolean"}));
    const Value fallback = ArgOr(args, 0, "default_value", Value::String(""));
    const bool boolean = Truthy(ArgOr(args, 1, "boolean", Value::Bool(false)));
    if (operand.is_undefined() || (boolean && !Truthy(operand))) return fallback;
    return operand;
  }
  if (name == "trim") {
    RETURN_IF_ERROR(args.Check(name, 1, {"chars"}));
    const Value chars = ArgOr(args, 0, "chars", Value::None());
    if (!chars.is_none() && !chars.is_string()) {
      return absl::InvalidArgumentError("strip arg must be None or str");
    }
    const std::string* chars_text = chars.is_string() ? &chars.string_value() : nullptr;
    return Value::String(PythonStrip(ToStr(operand), chars_text, true, true));
  }
  if (name == "upper") return Value::String(PythonUpper(ToStr(operand)));
  if (name == "lower") return Value::String(PythonLower(ToStr(operand)));
  if (name == "string") return Value::String(ToStr(operand));
  if (name == "safe") return Value::String(ToStr(operand));
  if (name == "e" || name == "escape") return Value::String(HtmlEscape(ToStr(operand)));
  if (name == "title") {
    // jinja2's own title: each word (split at spaces, -, (, {, [, <) gets its first character
    // upper-cased and the rest lower-cased.
    const std::u32string text = DecodeUtf8(ToStr(operand));
    std::u32string out;
    bool word_start = true;
    for (char32_t c : text) {
      const bool boundary =
          IsPythonSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
      if (boundary) {
        out.push_back(c);
        word_start = true;
      } else {
        out.push_back(word_start ? ToUpper(c) : ToLower(c));
        word_start = false;
      }
    }
    return Value::String(EncodeUtf8(out));
  }
  if (name == "capitalize") {
    std::u32string text = DecodeUtf8(ToStr(operand));
    for (size_t i = 0; i < text.size(); ++i) text[i] = i == 0 ? ToUpper(text[i]) : ToLower(text[i]);
    return Value::String(EncodeUtf8(text));
  }
  if (name == "replace") {
    RETURN_IF_ERROR(args.Check(name, 3, {"old", "new", "count"}));
    const Value* old_value = args.Find(0, "old");
    const Value* new_value = args.Find(1, "new");
    if (old_value == nullptr || new_value == nullptr) {
      return absl::InvalidArgumentError("replace() missing required arguments");
    }
    const Value count = ArgOr(args, 2, "count", Value::None());
    if (!count.is_none() && !count.is_integral()) {
      return absl::InvalidArgumentError("replace: count must be an integer");
    }
    ASSIGN_OR_RETURN(std::string replaced,
                     PythonReplace(host, ToStr(operand), ToStr(*old_value), ToStr(*new_value),
                                   count.is_none() ? -1 : count.int_value()));
    return Value::String(std::move(replaced));
  }
  if (name == "join") {
    RETURN_IF_ERROR(args.Check(name, 2, {"d", "attribute"}));
    const std::string separator = ToStr(ArgOr(args, 0, "d", Value::String("")));
    const Value attribute = ArgOr(args, 1, "attribute", Value::None());
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value item = items[i];
      if (!attribute.is_none()) {
        ASSIGN_OR_RETURN(item, LookupAttribute(host, item, attribute, nullptr));
      }
      if (i > 0) out += separator;
      out += ToStr(item);
      RETURN_IF_ERROR(host.CheckSize(out.size()));
    }
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(out.size() / 4 + items.size())));
    return Value::String(std::move(out));
  }
  if (name == "first" || name == "last") {
    if (operand.is_undefined()) {
      return Value::Undefined(StrCat("No ", name, " item, sequence was empty."));
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
    if (items.empty()) return Value::Undefined(StrCat("No ", name, " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
    return Value::List(std::move(items));
  }
  if (name == "items") {
    if (operand.is_undefined()) return Value::List({});
    if (!operand.is_dict()) {
      return absl::InvalidArgumentError("Can only get item pairs from a mapping.");
    }
    std::vector<Value> items;
    for (const auto& [key, value] : operand.dict().entries)
      items.push_back(Value::Tuple({key, value}));
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
    return Value::List(std::move(items));
  }
  if (name == "dictsort") {
    RETURN_IF_ERROR(args.Check(name, 3, {"case_sensitive", "by", "reverse"}));
    if (!operand.is_dict()) return absl::InvalidArgumentError("dictsort: a mapping is required");
    const bool case_sensitive = Truthy(ArgOr(args, 0, "case_sensitive", Value::Bool(false)));
    const Value by = ArgOr(args, 1, "by", Value::String("key"));
    const bool reverse = Truthy(ArgOr(args, 2, "reverse", Value::Bool(false)));
    size_t position = 0;
    if (by.is_string() && by.string_value() == "value") {
      position = 1;
    } else if (!by.is_string() || by.string_value() != "key") {
      return absl::InvalidArgumentError("You can only sort by either \"key\" or \"value\"");
    }
    std::vector<Value> items;
    std::vector<Value> keys;
    for (const auto& [key, value] : operand.dict().entries) {
      items.push_back(Value::Tuple({key, value}));
      const Value& sort_key = position == 0 ? key : value;
      keys.push_back(case_sensitive ? sort_key : IgnoreCase(sort_key));
    }
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size() * 4)));
    RETURN_IF_ERROR(SortByKeys(items, keys, reverse));
    return Value::List(std::move(items));
  }
  if (name == "sort") {
    RETURN_IF_ERROR(args.Check(name, 3, {"reverse", "case_sensitive", "attribute"}));
    const bool reverse = Truthy(ArgOr(args, 0, "reverse", Value::Bool(false)));
    const bool case_sensitive = Truthy(ArgOr(args, 1, "case_sensitive", Value::Bool(false)));
    const Value attribute = ArgOr(args, 2, "attribute", Value::None());
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size() * 4)));
    std::vector<std::string> attributes;
    if (attribute.is_string()) {
      for (absl::string_view part : absl::StrSplit(attribute.string_value(), ',')) {
        attributes.emplace_back(part);
      }
    }
    std::vector<Value> keys;
    for (const Value& item : items) {
      if (attribute.is_none()) {
        keys.push_back(case_sensitive ? item : IgnoreCase(item));
        continue;
      }
      if (!attribute.is_string()) {
        ASSIGN_OR_RETURN(Value key, LookupAttribute(host, item, attribute, nullptr));
        keys.push_back(case_sensitive ? key : IgnoreCase(key));
        continue;
      }
      std::vector<Value> parts;
      for (const std::string& part : attributes) {
        ASSIGN_OR_RETURN(Value key, LookupAttribute(host, item, Value::String(part), nullptr));
        parts.push_back(case_sensitive ? key : IgnoreCase(key));
      }
      keys.push_back(parts.size() == 1 ? parts[0] : Value::List(std::move(parts)));
    }
    RETURN_IF_ERROR(SortByKeys(items, keys, reverse));
    return Value::List(std::move(items));
  }
  if (name == "unique") {
    RETURN_IF_ERROR(args.Check(name, 2, {"case_sensitive", "attribute"}));
    const bool case_sensitive = Truthy(ArgOr(args, 0, "case_sensitive", Value::Bool(false)));
    const Value attribute = ArgOr(args, 1, "attribute", Value::None());
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
    RETURN_IF_ERROR(
        host.Charge(static_cast<int64_t>(items.size() * items.size() / 8 + items.size())));
    std::vector<Value> seen;
    std::vector<Value> kept;
    for (const Value& item : items) {
      Value key = item;
      if (!attribute.is_none()) {
        ASSIGN_OR_RETURN(key, LookupAttribute(host, item, attribute, nullptr));
      }
      if (!case_sensitive) key = IgnoreCase(key);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); })) {
        continue;
      }
      seen.push_back(key);
      kept.push_back(item);
    }
    return Value::List(std::move(kept));
  }
  if (name == "reverse") {
    if (operand.is_string()) {
      std::u32string text = DecodeUtf8(operand.string_value());
      std::reverse(text.begin(), text.end());
      return Value::String(EncodeUtf8(text));
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
    std::reverse(items.begin(), items.end());
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
    return Value::List(std::move(items));
  }
  if (name == "map") {
    if (!Truthy(operand)) return Value::List({});  // as select's
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(operand));
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
    std::vector<Value> mapped;
    if (args.positional.empty()) {
      const Value* attribute = args.Find(0, "attribute");
      if (attribute == nullptr) return absl::InvalidArgumentError("map requires a filter argument");
      RETURN_IF_ERROR(args.Check(name, 0, {"attribute", "default"}));
      const Value* fallback = args.Find(1, "default");
      for (const Value& item : items) {
        ASSIGN_OR_RETURN(Value value, LookupAttribute(host, item, *attribute, fallback));
        mapped.push_back(std::move(value));
      }
      return Value::List(std::move(mapped));
    }
    if (!args.positional[0].is_string() || !IsKnownFilter(args.positional[0].string_value())) {
      return absl::InvalidArgumentError(
          StrCat("No filter named ", ToRepr(args.positional[0]), "."));
    }
    CallArgs filter_args;
    filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
    filter_args.keywords = args.keywords;
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value value,
                       host.Filter(args.positional[0].string_value(), item, filter_args));
      mapped.push_back(std::move(value));
    }
    return Value::List(std::move(mapped));
  }
  if (name == "select") return SelectOrReject(host, operand, args, true, false);
  if (name == "reject") return SelectOrReject(host, operand, args, false, false);
  if (name == "selectattr") return SelectOrReject(host, operand, args, true, true);
  if (name == "rejectattr") return SelectOrReject(host, operand, args, false, true);
  if (name == "sum") return Sum(host, operand, args);
  if (name == "min") return MinOrMax(host, operand, args, false);
  if (name == "max") return MinOrMax(host, operand, args, true);
  if (name == "int") {
    RETURN_IF_ERROR(args.Check(name, 2, {"default", "base"}));
    const Value fallback = ArgOr(args, 0, "default", Value::Int(0));
    const Value base = ArgOr(args, 1, "base", Value::Int(10));
    if (operand.is_integral()) return Value::Int(operand.int_value());
    if (operand.is_float()) {
      const double value = operand.number_value();
      if (std::isnan(value)) return fallback;  // ValueError, caught
      if (!(std::fabs(value) < 9.2e18)) {
        return absl::InvalidArgumentError("cannot convert float infinity to integer");
      }
      return Value::Int(static_cast<int64_t>(std::trunc(value)));
    }
    if (operand.is_string()) {
      if (std::optional<int64_t> parsed =
              ParsePythonInt(operand.string_value(),
                             base.is_integral() ? static_cast<int>(base.int_value()) : 10)) {
        return Value::Int(*parsed);
      }
      if (std::optional<double> parsed = ParsePythonFloat(operand.string_value())) {
        if (std::isnan(*parsed)) return fallback;
        if (!(std::fabs(*parsed) < 9.2e18)) {
          return absl::InvalidArgumentError("cannot convert float infinity to integer");
        }
        return Value::Int(static_cast<int64_t>(std::trunc(*parsed)));
      }
    }
    return fallback;
  }
  if (name == "float") {
    RETURN_IF_ERROR(args.Check(name, 1, {"default"}));
    const Value fallback = ArgOr(args, 0, "default", Value::Float(0.0));
    if (operand.is_number()) return Value::Float(operand.number_value());
    if (operand.is_string()) {
      if (std::optional<double> parsed = ParsePythonFloat(operand.string_value())) {
        return Value::Float(*parsed);
      }
    }
    return fallback;
  }
  if (name == "abs") {
    if (operand.is_float()) return Value::Float(std::fabs(operand.number_value()));
    if (operand.is_integral()) {
      if (operand.int_value() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
      return Value::Int(std::llabs(operand.int_value()));
    }
    if (operand.is_undefined()) return UndefinedError(operand);
    return absl::InvalidArgumentError(
        StrCat("bad operand type for abs(): '", TypeName(operand), "'"));
  }
  if (name == "round") {
    RETURN_IF_ERROR(args.Check(name, 2, {"precision", "method"}));
    const Value precision = ArgOr(args, 0, "precision", Value::Int(0));
    const Value method = ArgOr(args, 1, "method", Value::String("common"));
    if (!precision.is_integral())
      return absl::InvalidArgumentError("round: precision must be an integer");
    if (!method.is_string() ||
        (method.string_value() != "common" && method.string_value() != "ceil" &&
         method.string_value() != "floor")) {
      return absl::InvalidArgumentError("method must be common, ceil or floor");
    }
    if (!operand.is_number()) {
      if (operand.is_undefined()) return UndefinedError(operand);
      return absl::InvalidArgumentError(
          StrCat("type ", TypeName(operand), " doesn't define __round__ method"));
    }
    if (method.string_value() == "common") {
      if (operand.is_integral()) return Value::Int(operand.int_value());
      return Value::Float(RoundFloat(operand.number_value(), precision.int_value()));
    }
    const double scale = std::pow(10.0, static_cast<double>(precision.int_value()));
    const double scaled = operand.number_value() * scale;
    const double rounded = method.string_value() == "ceil" ? std::ceil(scaled) : std::floor(scaled);
    return Value::Float(rounded / scale);
  }
  if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    const std::string text = ToStr(operand);
    for (size_t pos = 0; pos < text.size();) {
      size_t length = 0;
      const char32_t c = CodePointAt(text, pos, &length);
      const bool word_char = IsAlnum(c) || c == '_';
      if (word_char && !in_word) ++words;
      in_word = word_char;
      pos += length;
    }
    return Value::Int(words);
  }
  if (name == "center") {
    CallArgs pad_args;
    pad_args.positional.push_back(ArgOr(args, 0, "width", Value::Int(80)));
    return CallMethod(
        host,
        CallableData{CallableData::Type::kMethod, "center",
                     std::make_shared<Value>(Value::String(ToStr(operand))), nullptr, nullptr},
        pad_args);
  }
  if (name == "truncate") return Truncate(host, operand, args);
  if (name == "format") {
    if (!args.positional.empty() && !args.keywords.empty()) {
      return absl::InvalidArgumentError(
          "can't handle positional and keyword arguments at the same time");
    }
    Value values;
    if (!args.keywords.empty()) {
      auto dict = std::make_shared<DictData>();
      for (const auto& [key, value] : args.keywords) dict->Set(Value::String(key), value);
      values = Value::Dict(std::move(dict));
    } else {
      values = Value::Tuple(args.positional);
    }
    ASSIGN_OR_RETURN(std::string formatted, PythonPercentFormat(host, ToStr(operand), values));
    return Value::String(std::move(formatted));
  }
  if (name == "attr") {
    const Value* attribute = args.Find(0, "name");
    if (attribute == nullptr || !attribute->is_string()) {
      return absl::InvalidArgumentError("attr: a name is required");
    }
    if (operand.is_dict()) {
      // Only real attributes (methods): attr() does not fall back to items.
      ASSIGN_OR_RETURN(Value value, host.GetAttribute(operand, attribute->string_value()));
      if (value.is_callable() || (value.is_undefined() && value.undefined_unsafe())) return value;
      return Value::Undefined(
          StrCat("'dict object' has no attribute '", attribute->string_value(), "'"));
    }
    if (operand.is_undefined()) return Value::Undefined(operand.undefined_message());
    return host.GetAttribute(operand, attribute->string_value());
  }
  if (name == "indent") return Indent(host, operand, args);
  return absl::InvalidArgumentError(StrCat("No filter named '", name, "'."));
}

absl::StatusOr<bool> Compare(std::string_view op, const Value& left, const Value& right) {
  if (op == "==") return Equals(left, right);
  if (op == "!=") return !Equals(left, right);
  if (left.is_undefined()) return UndefinedError(left);
  if (right.is_undefined()) return UndefinedError(right);
  if (op == "<") return LessThan(left, right);
  if (op == ">") return LessThan(right, left);
  ASSIGN_OR_RETURN(bool less, op == "<=" ? LessThan(right, left) : LessThan(left, right));
  return !less;
}

absl::StatusOr<bool> Modulo(const Value& value, const Value& divisor, int64_t remainder) {
  if (value.is_undefined()) return UndefinedError(value);
  if (!value.is_number() || !divisor.is_number()) {
    return absl::InvalidArgumentError(StrCat("unsupported operand type(s) for %: '",
                                             TypeName(value), "' and '", TypeName(divisor), "'"));
  }
  if (divisor.number_value() == 0)
    return absl::InvalidArgumentError("integer division or modulo by zero");
  if (value.is_float() || divisor.is_float()) {
    double result = std::fmod(value.number_value(), divisor.number_value());
    if (result != 0 && ((result < 0) != (divisor.number_value() < 0)))
      result += divisor.number_value();
    return result == static_cast<double>(remainder);
  }
  if (divisor.int_value() == -1) return remainder == 0;
  int64_t result = value.int_value() % divisor.int_value();
  if (result != 0 && ((result < 0) != (divisor.int_value() < 0))) result += divisor.int_value();
  return result == remainder;
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return FilterNames().contains(name); }
bool IsKnownTest(std::string_view name) { return TestNames().contains(name); }

absl::StatusOr<std::vector<Value>> Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>{};
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return value.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(value.dict().entries.size());
      for (const auto& [key, item] : value.dict().entries) keys.push_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> characters;
      const std::string& text = value.string_value();
      for (size_t pos = 0; pos < text.size();) {
        size_t length = 0;
        CodePointAt(text, pos, &length);
        characters.push_back(Value::String(text.substr(pos, length)));
        pos += length;
      }
      return characters;
    }
    default:
      return absl::InvalidArgumentError(StrCat("'", TypeName(value), "' object is not iterable"));
  }
}

absl::StatusOr<Value> ApplyFilter(FilterHost& host, std::string_view name, const Value& operand,
                                  const CallArgs& args) {
  // Unknown filters reach here only from branches the parser let through (jinja2 3.x fails
  // them when they run, not when the template compiles).
  if (!IsKnownFilter(name))
    return absl::InvalidArgumentError(StrCat("no filter named '", name, "'"));
  return ApplyFilterImpl(host, name, operand, args);
}

absl::StatusOr<bool> ApplyTest(FilterHost& host, std::string_view name, const Value& operand,
                               const CallArgs& args) {
  (void)host;
  if (!IsKnownTest(name)) return absl::InvalidArgumentError(StrCat("no test named '", name, "'"));
  const Value* argument = args.Find(0, "");
  const auto need_argument = [&]() -> absl::Status {
    if (argument == nullptr) {
      return absl::InvalidArgumentError(StrCat("test '", name, "' takes an argument"));
    }
    return absl::OkStatus();
  };
  if (name == "defined") return !operand.is_undefined();
  if (name == "undefined") return operand.is_undefined();
  if (name == "none") return operand.is_none();
  if (name == "boolean") return operand.is_bool();
  if (name == "true") return operand.is_bool() && operand.bool_value();
  if (name == "false") return operand.is_bool() && !operand.bool_value();
  if (name == "integer") return operand.is_int();
  if (name == "float") return operand.is_float();
  if (name == "number") return operand.is_number();
  if (name == "string") return operand.is_string();
  if (name == "mapping") return operand.is_dict();
  if (name == "iterable") {
    return operand.is_undefined() || operand.is_string() || operand.is_sequence() ||
           operand.is_dict();
  }
  if (name == "sequence") {
    return operand.is_undefined() || operand.is_string() || operand.is_sequence() ||
           operand.is_dict();
  }
  if (name == "callable") return operand.is_callable() || operand.is_undefined();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    const std::u32string text = DecodeUtf8(ToStr(operand));
    bool any_cased = false;
    for (char32_t c : text) {
      if (name == "lower" ? IsUpper(c) : IsLower(c)) return false;
      any_cased = any_cased || IsCased(c);
    }
    return any_cased;
  }
  if (name == "odd") return Modulo(operand, Value::Int(2), 1);
  if (name == "even") return Modulo(operand, Value::Int(2), 0);
  if (name == "divisibleby") {
    RETURN_IF_ERROR(need_argument());
    return Modulo(operand, *argument, 0);
  }
  if (name == "sameas") {
    RETURN_IF_ERROR(need_argument());
    return operand.SameObject(*argument);
  }
  if (name == "in") {
    RETURN_IF_ERROR(need_argument());
    return Contains(*argument, operand);
  }
  static const std::pair<std::string_view, std::string_view> kComparisons[] = {
      {"eq", "=="}, {"equalto", "=="}, {"ne", "!="},         {"lt", "<"}, {"lessthan", "<"},
      {"le", "<="}, {"gt", ">"},       {"greaterthan", ">"}, {"ge", ">="}};
  for (const auto& [test, op] : kComparisons) {
    if (name == test) {
      RETURN_IF_ERROR(need_argument());
      return Compare(op, operand, *argument);
    }
  }
  return absl::InvalidArgumentError(StrCat("No test named '", name, "'."));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            StrCat("'in <string>' requires string as left operand, not ", TypeName(item)));
      }
      return container.string_value().find(item.string_value()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return std::any_of(container.items().begin(), container.items().end(),
                         [&](const Value& element) { return Equals(element, item); });
    case Value::Kind::kDict:
      return container.dict().Find(item) != nullptr;
    default:
      return absl::InvalidArgumentError(
          StrCat("argument of type '", TypeName(container), "' is not iterable"));
  }
}

}  // namespace attnserve::jinja
