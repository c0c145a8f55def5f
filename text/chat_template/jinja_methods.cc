#include "text/chat_template/jinja_methods.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/chat_template/jinja_format.h"
#include "text/chat_template/jinja_text.h"

namespace attnserve::jinja {
namespace {

using Names = std::set<std::string, std::less<>>;

const Names& StringMethods() {
  static const Names names = {"capitalize", "casefold",  "center",       "count",        "endswith",
                              "find",       "format",    "index",        "isalnum",      "isalpha",
                              "isdecimal",  "isdigit",   "islower",      "isnumeric",    "isspace",
                              "istitle",    "isupper",   "join",         "ljust",        "lower",
                              "lstrip",     "partition", "removeprefix", "removesuffix", "replace",
                              "rfind",      "rindex",    "rjust",        "rpartition",   "rsplit",
                              "rstrip",     "split",     "splitlines",   "startswith",   "strip",
                              "swapcase",   "title",     "upper",        "zfill"};
  return names;
}
const Names& DictMethods() {
  static const Names names = {"get", "items", "keys", "values", "copy"};
  return names;
}
const Names& UnsafeDictMethods() {
  static const Names names = {"clear", "pop", "popitem", "setdefault", "update"};
  return names;
}
const Names& ListMethods() {
  static const Names names = {"index", "count", "copy", "pop", "clear"};
  return names;
}
const Names& UnsafeListMethods() {
  static const Names names = {"append", "extend", "insert", "remove", "reverse", "sort"};
  return names;
}

Value BoundMethod(const Value& receiver, std::string_view name) {
  auto callable = std::make_shared<CallableData>();
  callable->type = CallableData::Type::kMethod;
  callable->name = std::string(name);
  callable->receiver = std::make_shared<Value>(receiver);
  return Value::Callable(std::move(callable));
}

Value Unsafe(const Value& receiver, std::string_view name) {
  return Value::Undefined(
      StrCat("access to attribute '", name, "' of '", TypeName(receiver), "' object is unsafe."),
      /*unsafe=*/true);
}

Value NoAttribute(const Value& object, std::string_view name) {
  return Value::Undefined(StrCat("'", TypeName(object), " object' has no attribute '", name, "'"));
}

absl::Status UndefinedError(const Value& undefined) {
  const std::string& message = undefined.undefined_message();
  return absl::InvalidArgumentError(message.empty() ? "'undefined' is undefined" : message);
}

// A method or, for a dict, its item; nullopt when the type has no such attribute.
std::optional<Value> MethodOf(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Value::Kind::kString:
      if (StringMethods().contains(name)) return BoundMethod(object, name);
      break;
    case Value::Kind::kDict:
      if (DictMethods().contains(name)) return BoundMethod(object, name);
      if (UnsafeDictMethods().contains(name)) return Unsafe(object, name);
      break;
    case Value::Kind::kList:
      if (ListMethods().contains(name)) return BoundMethod(object, name);
      if (UnsafeListMethods().contains(name)) return Unsafe(object, name);
      break;
    case Value::Kind::kTuple:
      if (name == "index" || name == "count") return BoundMethod(object, name);
      break;
    case Value::Kind::kObject:
      if (object.object().type == ObjectData::Type::kLoop && name == "cycle") {
        return BoundMethod(object, name);
      }
      if (const Value* attribute = object.object().Find(name)) return *attribute;
      break;
    default:
      break;
  }
  return std::nullopt;
}

// Python's index normalization for one subscript; nullopt when out of range.
std::optional<size_t> NormalizeIndex(int64_t index, size_t size) {
  if (index < 0) index += static_cast<int64_t>(size);
  if (index < 0 || index >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(index);
}

std::string CharacterAt(std::string_view text, size_t index) {
  size_t pos = 0;
  for (size_t i = 0; pos < text.size(); ++i) {
    size_t length = 0;
    CodePointAt(text, pos, &length);
    if (i == index) return std::string(text.substr(pos, length));
    pos += length;
  }
  return "";
}

bool IsStripped(char32_t c, const std::u32string* chars) {
  return chars == nullptr ? IsPythonSpace(c) : chars->find(c) != std::u32string::npos;
}

std::string PythonTitle(std::string_view text) {
  std::string out;
  bool previous_cased = false;
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    const char32_t c = CodePointAt(text, pos, &length);
    if (IsCased(c)) {
      AppendUtf8(previous_cased ? ToLower(c) : ToUpper(c), out);
      previous_cased = true;
    } else {
      out.append(text.substr(pos, length));
      previous_cased = false;
    }
    pos += length;
  }
  return out;
}

std::string PythonCapitalize(std::string_view text) {
  std::u32string chars = DecodeUtf8(text);
  for (size_t i = 0; i < chars.size(); ++i)
    chars[i] = i == 0 ? ToUpper(chars[i]) : ToLower(chars[i]);
  return EncodeUtf8(chars);
}

std::string PythonSwapCase(std::string_view text) {
  std::u32string chars = DecodeUtf8(text);
  for (char32_t& c : chars) c = IsUpper(c) ? ToLower(c) : ToUpper(c);
  return EncodeUtf8(chars);
}

absl::StatusOr<int64_t> IntArgument(const Value* value, std::string_view what, int64_t fallback) {
  if (value == nullptr || value->is_none()) return fallback;
  if (!value->is_integral()) {
    return absl::InvalidArgumentError(
        StrCat(what, ": '", TypeName(*value), "' object cannot be interpreted as an integer"));
  }
  return value->int_value();
}

absl::StatusOr<std::string> StringArgument(const Value* value, std::string_view what) {
  if (value == nullptr || !value->is_string()) {
    return absl::InvalidArgumentError(
        StrCat(what, " argument must be str, not ", value ? TypeName(*value) : "nothing"));
  }
  return value->string_value();
}

// Python's slice bounds for a find over code points [start, end).
void FindRange(const CallArgs& args, size_t size, size_t* begin, size_t* end) {
  const auto bound = [&](const Value* value, size_t fallback) -> size_t {
    if (value == nullptr || !value->is_integral()) return fallback;
    int64_t index = value->int_value();
    if (index < 0) index = std::max<int64_t>(0, index + static_cast<int64_t>(size));
    return static_cast<size_t>(std::min<int64_t>(index, static_cast<int64_t>(size)));
  };
  *begin = bound(args.Find(1, ""), 0);
  *end = bound(args.Find(2, ""), size);
}

absl::StatusOr<Value> PadString(FilterHost& host, std::string_view text, const CallArgs& args,
                                char how) {
  ASSIGN_OR_RETURN(int64_t width, IntArgument(args.Find(0, "width"), "width", 0));
  std::u32string fill = U" ";
  if (const Value* fill_value = args.Find(1, "fillchar")) {
    if (!fill_value->is_string() || CodePointCount(fill_value->string_value()) != 1) {
      return absl::InvalidArgumentError("The fill character must be exactly one character long");
    }
    fill = DecodeUtf8(fill_value->string_value());
  }
  const int64_t length = CodePointCount(text);
  if (width <= length) return Value::String(std::string(text));
  RETURN_IF_ERROR(host.CheckSize(static_cast<size_t>(width) * 4));
  const int64_t padding = width - length;
  int64_t left = 0;
  if (how == '>') {
    left = padding;
  } else if (how == '^') {
    // CPython's centering puts the odd extra space on the left when the width is odd.
    left = padding / 2 + (padding & width & 1);
  }
  const std::string fill_text = EncodeUtf8(fill);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill_text;
  out += text;
  for (int64_t i = left; i < padding; ++i) out += fill_text;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> CallStringMethod(FilterHost& host, const std::string& text,
                                       std::string_view name, const CallArgs& args) {
  const Value* first = args.Find(0, "");
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    RETURN_IF_ERROR(args.Check(name, 1, {}));
    const std::string* chars = nullptr;
    if (first != nullptr && !first->is_none()) {
      ASSIGN_OR_RETURN(const std::string& value, StringArgument(first, name));
      chars = &value;
      return Value::String(PythonStrip(text, chars, name != "rstrip", name != "lstrip"));
    }
    return Value::String(PythonStrip(text, nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    RETURN_IF_ERROR(args.Check(name, 2, {"sep", "maxsplit"}));
    const Value* separator = args.Find(0, "sep");
    ASSIGN_OR_RETURN(int64_t max_split, IntArgument(args.Find(1, "maxsplit"), name, -1));
    std::string separator_text;
    if (separator != nullptr && !separator->is_none()) {
      ASSIGN_OR_RETURN(separator_text, StringArgument(separator, name));
      if (separator_text.empty()) return absl::InvalidArgumentError("empty separator");
    }
    const bool has_separator = separator != nullptr && !separator->is_none();
    std::vector<std::string> parts;
    if (name == "split" || max_split < 0) {
      parts = PythonSplit(text, has_separator ? &separator_text : nullptr, max_split);
    } else {
      // rsplit with a limit: split the reversed text by the reversed separator.
      std::u32string reversed = DecodeUtf8(text);
      std::reverse(reversed.begin(), reversed.end());
      std::u32string reversed_separator = DecodeUtf8(separator_text);
      std::reverse(reversed_separator.begin(), reversed_separator.end());
      const std::string reversed_separator_text = EncodeUtf8(reversed_separator);
      parts = PythonSplit(EncodeUtf8(reversed), has_separator ? &reversed_separator_text : nullptr,
                          max_split);
      std::reverse(parts.begin(), parts.end());
      for (std::string& part : parts) {
        std::u32string chars = DecodeUtf8(part);
        std::reverse(chars.begin(), chars.end());
        part = EncodeUtf8(chars);
      }
    }
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(parts.size())));
    std::vector<Value> items;
    for (std::string& part : parts) items.push_back(Value::String(std::move(part)));
    return Value::List(std::move(items));
  }
  if (name == "splitlines") {
    RETURN_IF_ERROR(args.Check(name, 1, {"keepends"}));
    const Value* keep = args.Find(0, "keepends");
    std::vector<Value> items;
    for (std::string& line : PythonSplitLines(text, keep != nullptr && Truthy(*keep))) {
      items.push_back(Value::String(std::move(line)));
    }
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
    return Value::List(std::move(items));
  }
  if (name == "startswith" || name == "endswith") {
    RETURN_IF_ERROR(args.Check(name, 1, {}));
    if (first == nullptr) return absl::InvalidArgumentError(StrCat(name, " takes an argument"));
    std::vector<Value> candidates = first->is_tuple() ? first->items() : std::vector<Value>{*first};
    for (const Value& candidate : candidates) {
      if (!candidate.is_string()) {
        return absl::InvalidArgumentError(
            StrCat(name, " first arg must be str or a tuple of str, not ", TypeName(candidate)));
      }
      const std::string& affix = candidate.string_value();
      const bool match = name == "startswith" ? text.compare(0, affix.size(), affix) == 0
                                              : text.size() >= affix.size() &&
                                                    text.compare(text.size() - affix.size(),
                                                                 affix.size(), affix) == 0;
      if (match) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "upper") return Value::String(PythonUpper(text));
  if (name == "lower" || name == "casefold") return Value::String(PythonLower(text));
  if (name == "title") return Value::String(PythonTitle(text));
  if (name == "capitalize") return Value::String(PythonCapitalize(text));
  if (name == "swapcase") return Value::String(PythonSwapCase(text));
  if (name == "replace") {
    RETURN_IF_ERROR(args.Check(name, 3, {"count"}));
    ASSIGN_OR_RETURN(std::string old_text, StringArgument(first, "replace()"));
    ASSIGN_OR_RETURN(std::string new_text, StringArgument(args.Find(1, ""), "replace()"));
    ASSIGN_OR_RETURN(int64_t count, IntArgument(args.Find(2, "count"), "replace()", -1));
    ASSIGN_OR_RETURN(std::string replaced, PythonReplace(host, text, old_text, new_text, count));
    return Value::String(std::move(replaced));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ASSIGN_OR_RETURN(std::string needle_text, StringArgument(first, name));
    const std::u32string haystack = DecodeUtf8(text);
    const std::u32string needle = DecodeUtf8(needle_text);
    size_t begin = 0;
    size_t end = 0;
    FindRange(args, haystack.size(), &begin, &end);
    const std::u32string_view window =
        begin <= end ? std::u32string_view(haystack).substr(begin, end - begin)
                     : std::u32string_view();
    if (name == "count") {
      if (begin > end) return Value::Int(0);
      if (needle.empty()) return Value::Int(static_cast<int64_t>(window.size()) + 1);
      int64_t count = 0;
      for (size_t at = window.find(needle); at != std::u32string_view::npos;
           at = window.find(needle, at + needle.size())) {
        ++count;
      }
      return Value::Int(count);
    }
    size_t at = std::u32string_view::npos;
    if (begin <= end) at = name[0] == 'r' ? window.rfind(needle) : window.find(needle);
    if (at == std::u32string_view::npos) {
      if (name == "index" || name == "rindex") {
        return absl::InvalidArgumentError("substring not found");
      }
      return Value::Int(-1);
    }
    return Value::Int(static_cast<int64_t>(begin + at));
  }
  if (name == "join") {
    RETURN_IF_ERROR(args.Check(name, 1, {}));
    if (first == nullptr) return absl::InvalidArgumentError("join() takes exactly one argument");
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*first));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return absl::InvalidArgumentError(
            StrCat("sequence item ", i, ": expected str instance, ", TypeName(items[i]), " found"));
      }
      if (i > 0) out += text;
      out += items[i].string_value();
      RETURN_IF_ERROR(host.CheckSize(out.size()));
    }
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(out.size() / 4 + items.size())));
    return Value::String(std::move(out));
  }
  if (name == "format") {
    ASSIGN_OR_RETURN(std::string formatted, PythonStrFormat(host, text, args));
    return Value::String(std::move(formatted));
  }
  if (name.substr(0, 2) == "is") {
    const std::u32string chars = DecodeUtf8(text);
    if (chars.empty()) return Value::Bool(false);
    if (name == "islower" || name == "isupper") {
      bool any_cased = false;
      for (char32_t c : chars) {
        if (name == "islower" ? IsUpper(c) : IsLower(c)) return Value::Bool(false);
        any_cased = any_cased || IsCased(c);
      }
      return Value::Bool(any_cased);
    }
    if (name == "istitle") {
      bool any_cased = false;
      bool previous_cased = false;
      for (char32_t c : chars) {
        if (IsUpper(c) || IsLower(c)) {
          if (IsUpper(c) == previous_cased) return Value::Bool(false);
          previous_cased = any_cased = true;
        } else {
          previous_cased = false;
        }
      }
      return Value::Bool(any_cased);
    }
    bool (*predicate)(char32_t) = nullptr;
    if (name == "isalnum") predicate = IsAlnum;
    if (name == "isalpha") predicate = IsAlpha;
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") predicate = IsDigit;
    if (name == "isspace") predicate = IsPythonSpace;
    if (predicate == nullptr) return absl::InvalidArgumentError(StrCat("str has no ", name));
    return Value::Bool(std::all_of(chars.begin(), chars.end(), predicate));
  }
  if (name == "center") return PadString(host, text, args, '^');
  if (name == "ljust") return PadString(host, text, args, '<');
  if (name == "rjust") return PadString(host, text, args, '>');
  if (name == "zfill") {
    ASSIGN_OR_RETURN(int64_t width, IntArgument(first, "zfill", 0));
    const int64_t length = CodePointCount(text);
    if (width <= length) return Value::String(text);
    RETURN_IF_ERROR(host.CheckSize(static_cast<size_t>(width)));
    const bool signed_text = !text.empty() && (text[0] == '-' || text[0] == '+');
    std::string out = signed_text ? text.substr(0, 1) : "";
    out += std::string(static_cast<size_t>(width - length), '0');
    out += signed_text ? text.substr(1) : text;
    return Value::String(std::move(out));
  }
  if (name == "partition" || name == "rpartition") {
    ASSIGN_OR_RETURN(std::string separator, StringArgument(first, name));
    if (separator.empty()) return absl::InvalidArgumentError("empty separator");
    const size_t at = name == "partition" ? text.find(separator) : text.rfind(separator);
    if (at == std::string::npos) {
      if (name == "partition") {
        return Value::Tuple({Value::String(text), Value::String(""), Value::String("")});
      }
      return Value::Tuple({Value::String(""), Value::String(""), Value::String(text)});
    }
    return Value::Tuple({Value::String(text.substr(0, at)), Value::String(separator),
                         Value::String(text.substr(at + separator.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ASSIGN_OR_RETURN(std::string affix, StringArgument(first, name));
    if (name == "removeprefix" && text.compare(0, affix.size(), affix) == 0) {
      return Value::String(text.substr(affix.size()));
    }
    if (name == "removesuffix" && !affix.empty() && text.size() >= affix.size() &&
        text.compare(text.size() - affix.size(), affix.size(), affix) == 0) {
      return Value::String(text.substr(0, text.size() - affix.size()));
    }
    return Value::String(text);
  }
  return absl::InvalidArgumentError(StrCat("unsupported str method '", name, "'"));
}

absl::StatusOr<Value> CallDictMethod(FilterHost& host, const Value& dict, std::string_view name,
                                     const CallArgs& args) {
  const auto& entries = dict.dict().entries;
  if (name == "get") {
    RETURN_IF_ERROR(args.Check(name, 2, {}));
    const Value* key = args.Find(0, "");
    if (key == nullptr)
      return absl::InvalidArgumentError("get expected at least 1 argument, got 0");
    if (const Value* value = dict.dict().Find(*key)) return *value;
    const Value* fallback = args.Find(1, "");
    return fallback ? *fallback : Value::None();
  }
  RETURN_IF_ERROR(args.Check(name, 0, {}));
  RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(entries.size())));
  if (name == "copy") {
    auto copy = std::make_shared<DictData>(dict.dict());
    return Value::Dict(std::move(copy));
  }
  std::vector<Value> items;
  items.reserve(entries.size());
  for (const auto& [key, value] : entries) {
    if (name == "items") {
      items.push_back(Value::Tuple({key, value}));
    } else {
      items.push_back(name == "keys" ? key : value);
    }
  }
  return Value::List(std::move(items));
}

absl::StatusOr<Value> CallSequenceMethod(FilterHost& host, const Value& sequence,
                                         std::string_view name, const CallArgs& args) {
  std::vector<Value>& items = sequence.items();
  const Value* first = args.Find(0, "");
  if (name == "count") {
    if (first == nullptr) return absl::InvalidArgumentError("count() takes exactly one argument");
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
    return Value::Int(std::count_if(items.begin(), items.end(),
                                    [&](const Value& item) { return Equals(item, *first); }));
  }
  if (name == "index") {
    if (first == nullptr) return absl::InvalidArgumentError("index expected at least 1 argument");
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
    for (size_t i = 0; i < items.size(); ++i) {
      if (Equals(items[i], *first)) return Value::Int(static_cast<int64_t>(i));
    }
    return absl::InvalidArgumentError(StrCat(ToRepr(*first), " is not in list"));
  }
  if (name == "copy") {
    RETURN_IF_ERROR(host.Charge(static_cast<int64_t>(items.size())));
    return Value::List(items);
  }
  if (name == "clear") {
    items.clear();
    return Value::None();
  }
  if (name == "pop") {
    if (items.empty()) return absl::InvalidArgumentError("pop from empty list");
    ASSIGN_OR_RETURN(int64_t index, IntArgument(first, "pop", -1));
    const std::optional<size_t> at = NormalizeIndex(index, items.size());
    if (!at) return absl::InvalidArgumentError("pop index out of range");
    Value value = items[*at];
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(*at));
    return value;
  }
  return absl::InvalidArgumentError(StrCat("unsupported list method '", name, "'"));
}

}  // namespace

std::string PythonStrip(std::string_view text, const std::string* chars, bool left, bool right) {
  std::u32string strip_chars;
  if (chars != nullptr) strip_chars = DecodeUtf8(*chars);
  const std::u32string* set = chars ? &strip_chars : nullptr;
  size_t begin = 0;
  size_t end = text.size();
  if (left) {
    while (begin < end) {
      size_t length = 0;
      if (!IsStripped(CodePointAt(text, begin, &length), set)) break;
      begin += length;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80 &&
             end - start < 4) {
        --start;
      }
      size_t length = 0;
      const char32_t c = CodePointAt(text, start, &length);
      if (start + length != end || !IsStripped(c, set)) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::vector<std::string> PythonSplit(std::string_view text, const std::string* separator,
                                     int64_t max_split) {
  std::vector<std::string> parts;
  if (separator != nullptr) {
    size_t start = 0;
    while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
      const size_t at = text.find(*separator, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(text.substr(start, at - start));
      start = at + separator->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  size_t pos = 0;
  while (true) {
    while (pos < text.size() && WhitespaceLengthAt(text, pos) > 0)
      pos += WhitespaceLengthAt(text, pos);
    if (pos >= text.size()) break;
    if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
      // The rest, without its trailing whitespace, is the last part.
      parts.push_back(PythonStrip(text.substr(pos), nullptr, false, true));
      break;
    }
    size_t end = pos;
    while (end < text.size() && WhitespaceLengthAt(text, end) == 0) {
      size_t length = 0;
      CodePointAt(text, end, &length);
      end += length;
    }
    parts.emplace_back(text.substr(pos, end - pos));
    pos = end;
  }
  return parts;
}

std::vector<std::string> PythonSplitLines(std::string_view text, bool keep_ends) {
  std::vector<std::string> lines;
  size_t start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    const char32_t c = CodePointAt(text, pos, &length);
    const bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                          c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) {
      pos += length;
      continue;
    }
    size_t end = pos + length;
    if (c == '\r' && end < text.size() && text[end] == '\n') ++end;
    lines.emplace_back(text.substr(start, (keep_ends ? end : pos) - start));
    start = pos = end;
  }
  if (start < text.size()) lines.emplace_back(text.substr(start));
  return lines;
}

absl::StatusOr<Value> GetAttribute(const Value& object, std::string_view name) {
  if (object.is_undefined()) return UndefinedError(object);
  if (std::optional<Value> method = MethodOf(object, name)) return *method;
  if (object.is_dict()) {
    if (const Value* value = object.dict().Find(name)) return *value;
  }
  return NoAttribute(object, name);
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key) {
  if (object.is_undefined()) return UndefinedError(object);
  switch (object.kind()) {
    case Value::Kind::kDict:
      if (const Value* value = object.dict().Find(key)) return *value;
      break;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      if (key.is_integral()) {
        if (auto at = NormalizeIndex(key.int_value(), object.items().size())) {
          return object.items()[*at];
        }
        return Value::Undefined(
            StrCat("'", TypeName(object), " object' has no element ", key.int_value()));
      }
      break;
    case Value::Kind::kString:
      if (key.is_integral()) {
        const std::string& text = object.string_value();
        if (auto at = NormalizeIndex(key.int_value(), static_cast<size_t>(CodePointCount(text)))) {
          return Value::String(CharacterAt(text, *at));
        }
        return Value::Undefined(StrCat("'str object' has no element ", key.int_value()));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {
    if (std::optional<Value> method = MethodOf(object, key.string_value())) return *method;
    return NoAttribute(object, key.string_value());
  }
  return Value::Undefined(StrCat("'", TypeName(object), " object' has no element ", ToRepr(key)));
}

absl::StatusOr<Value> Slice(const Value& object, const Value& start_value, const Value& stop_value,
                            const Value& step_value) {
  if (object.is_undefined()) return UndefinedError(object);
  const auto is_bound = [](const Value& v) { return v.is_none() || v.is_integral(); };
  if (!is_bound(start_value) || !is_bound(stop_value) || !is_bound(step_value) ||
      !(object.is_sequence() || object.is_string())) {
    return Value::Undefined(StrCat("'", TypeName(object), " object' cannot be sliced"));
  }
  const int64_t step = step_value.is_none() ? 1 : step_value.int_value();
  if (step == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  std::u32string chars;
  if (object.is_string()) chars = DecodeUtf8(object.string_value());
  const int64_t size = object.is_string() ? static_cast<int64_t>(chars.size())
                                          : static_cast<int64_t>(object.items().size());
  const auto adjust = [&](const Value& bound, int64_t fallback) {
    if (bound.is_none()) return fallback;
    int64_t index = bound.int_value();
    if (index < 0) {
      index += size;
      if (index < 0) index = step < 0 ? -1 : 0;
    } else if (index >= size) {
      index = step < 0 ? size - 1 : size;
    }
    return index;
  };
  const int64_t start = adjust(start_value, step < 0 ? size - 1 : 0);
  const int64_t stop = adjust(stop_value, step < 0 ? -1 : size);
  std::vector<int64_t> indices;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) indices.push_back(i);
  if (object.is_string()) {
    std::u32string out;
    for (int64_t i : indices) out.push_back(chars[static_cast<size_t>(i)]);
    return Value::String(EncodeUtf8(out));
  }
  std::vector<Value> items;
  items.reserve(indices.size());
  for (int64_t i : indices) items.push_back(object.items()[static_cast<size_t>(i)]);
  return object.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
}

absl::StatusOr<Value> CallMethod(FilterHost& host, const CallableData& method,
                                 const CallArgs& args) {
  const Value& receiver = *method.receiver;
  switch (receiver.kind()) {
    case Value::Kind::kString:
      return CallStringMethod(host, receiver.string_value(), method.name, args);
    case Value::Kind::kDict:
      return CallDictMethod(host, receiver, method.name, args);
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return CallSequenceMethod(host, receiver, method.name, args);
    case Value::Kind::kObject: {
      // loop.cycle(*values)
      if (args.positional.empty()) return absl::InvalidArgumentError("no items for cycling given");
      const Value* index0 = receiver.object().Find("index0");
      const int64_t index = index0 ? index0->int_value() : 0;
      return args.positional[static_cast<size_t>(index) % args.positional.size()];
    }
    default:
      return absl::InvalidArgumentError(StrCat("'", method.name, "' is not callable"));
  }
}

}  // namespace attnserve::jinja
