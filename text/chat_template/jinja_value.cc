#include "text/chat_template/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/chat_template/jinja_text.h"

namespace attnserve::jinja {
namespace {

// Values can refer to themselves (a namespace holding itself); printing and comparing stop
// this deep rather than overflow the stack.
constexpr int kMaxNesting = 100;

}  // namespace

const Value* DictData::Find(const Value& key) const {
  for (const auto& [existing, value] : entries) {
    if (Equals(existing, key)) return &value;
  }
  return nullptr;
}

const Value* DictData::Find(std::string_view key) const {
  for (const auto& [existing, value] : entries) {
    if (existing.is_string() && existing.string_value() == key) return &value;
  }
  return nullptr;
}

void DictData::Set(Value key, Value value) {
  for (auto& [existing, current] : entries) {
    if (Equals(existing, key)) {
      current = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* ObjectData::Find(std::string_view name) const {
  for (const auto& [existing, value] : attributes) {
    if (existing == name) return &value;
  }
  return nullptr;
}

void ObjectData::Set(std::string_view name, Value value) {
  for (auto& [existing, current] : attributes) {
    if (existing == name) {
      current = std::move(value);
      return;
    }
  }
  attributes.emplace_back(std::string(name), std::move(value));
}

Value Value::Undefined(std::string message, bool unsafe) {
  Value value;
  value.ref_ = std::make_shared<std::string>(std::move(message));
  value.scalar_.boolean = unsafe;
  return value;
}

Value Value::None() {
  Value value;
  value.kind_ = Kind::kNone;
  return value;
}

Value Value::Bool(bool b) {
  Value value;
  value.kind_ = Kind::kBool;
  value.scalar_.boolean = b;
  return value;
}

Value Value::Int(int64_t i) {
  Value value;
  value.kind_ = Kind::kInt;
  value.scalar_.integer = i;
  return value;
}

Value Value::Float(double f) {
  Value value;
  value.kind_ = Kind::kFloat;
  value.scalar_.real = f;
  return value;
}

Value Value::String(std::string s) {
  Value value;
  value.kind_ = Kind::kString;
  value.ref_ = std::make_shared<std::string>(std::move(s));
  return value;
}

Value Value::List(std::vector<Value> items) {
  Value value;
  value.kind_ = Kind::kList;
  value.ref_ = std::make_shared<ListData>(ListData{std::move(items)});
  return value;
}

Value Value::Tuple(std::vector<Value> items) {
  Value value = List(std::move(items));
  value.kind_ = Kind::kTuple;
  return value;
}

Value Value::Dict(std::shared_ptr<DictData> dict) {
  Value value;
  value.kind_ = Kind::kDict;
  value.ref_ = std::move(dict);
  return value;
}

Value Value::EmptyDict() { return Dict(std::make_shared<DictData>()); }

Value Value::Object(std::shared_ptr<ObjectData> object) {
  Value value;
  value.kind_ = Kind::kObject;
  value.ref_ = std::move(object);
  return value;
}

Value Value::Callable(std::shared_ptr<CallableData> callable) {
  Value value;
  value.kind_ = Kind::kCallable;
  value.ref_ = std::move(callable);
  return value;
}

const std::string& Value::string_value() const {
  return *static_cast<const std::string*>(ref_.get());
}

const std::string& Value::undefined_message() const {
  static const std::string kEmpty;
  return ref_ ? *static_cast<const std::string*>(ref_.get()) : kEmpty;
}

std::vector<Value>& Value::items() const { return static_cast<ListData*>(ref_.get())->items; }
DictData& Value::dict() const { return *static_cast<DictData*>(ref_.get()); }
ObjectData& Value::object() const { return *static_cast<ObjectData*>(ref_.get()); }
CallableData& Value::callable() const { return *static_cast<CallableData*>(ref_.get()); }

bool Value::SameObject(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return bool_value() == other.bool_value();
    case Kind::kInt:
      // CPython caches small ints, so `1 is 1` holds; large ones are usually distinct objects.
      return int_value() == other.int_value() && int_value() >= -5 && int_value() <= 256;
    case Kind::kFloat:
      return false;
    default:
      return ref_ == other.ref_;
  }
}

bool Truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return value.bool_value();
    case Value::Kind::kInt:
      return value.int_value() != 0;
    case Value::Kind::kFloat:
      return value.number_value() != 0.0;
    case Value::Kind::kString:
      return !value.string_value().empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return !value.items().empty();
    case Value::Kind::kDict:
      return !value.dict().entries.empty();
    default:
      return true;
  }
}

std::string TypeName(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kObject:
      switch (value.object().type) {
        case ObjectData::Type::kNamespace:
          return "Namespace";
        case ObjectData::Type::kLoop:
          return "LoopContext";
        case ObjectData::Type::kCycler:
          return "Cycler";
        case ObjectData::Type::kJoiner:
          return "Joiner";
      }
      return "object";
    case Value::Kind::kCallable:
      switch (value.callable().type) {
        case CallableData::Type::kMacro:
          return "Macro";
        case CallableData::Type::kGlobal:
          return "function";
        case CallableData::Type::kMethod:
          return "builtin_function_or_method";
      }
  }
  return "object";
}

namespace {

void AppendRepr(const Value& value, int depth, bool as_str, std::string& out) {
  if (depth > kMaxNesting) {
    out += "...";
    return;
  }
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      if (!as_str) out += "Undefined";
      return;
    case Value::Kind::kNone:
      out += "None";
      return;
    case Value::Kind::kBool:
      out += value.bool_value() ? "True" : "False";
      return;
    case Value::Kind::kInt:
      absl::StrAppend(&out, value.int_value());
      return;
    case Value::Kind::kFloat:
      out += PythonFloatRepr(value.number_value());
      return;
    case Value::Kind::kString:
      out += as_str ? value.string_value() : PythonStringRepr(value.string_value());
      return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const bool tuple = value.is_tuple();
      out += tuple ? "(" : "[";
      const auto& items = value.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        AppendRepr(items[i], depth + 1, false, out);
      }
      if (tuple && items.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return;
    }
    case Value::Kind::kDict: {
      out += "{";
      bool first = true;
      for (const auto& [key, item] : value.dict().entries) {
        if (!first) out += ", ";
        first = false;
        AppendRepr(key, depth + 1, false, out);
        out += ": ";
        AppendRepr(item, depth + 1, false, out);
      }
      out += "}";
      return;
    }
    case Value::Kind::kObject: {
      const ObjectData& object = value.object();
      if (object.type == ObjectData::Type::kLoop) {
        const Value* index = object.Find("index");
        const Value* length = object.Find("length");
        absl::StrAppend(&out, "<LoopContext ", index ? ToStr(*index) : "?", "/",
                        length ? ToStr(*length) : "?", ">");
        return;
      }
      if (object.type != ObjectData::Type::kNamespace) {
        absl::StrAppend(&out, "<jinja2.utils.", TypeName(value), " object>");
        return;
      }
      out += "<Namespace {";
      bool first = true;
      for (const auto& [name, item] : object.attributes) {
        if (!first) out += ", ";
        first = false;
        out += PythonStringRepr(name);
        out += ": ";
        AppendRepr(item, depth + 1, false, out);
      }
      out += "}>";
      return;
    }
    case Value::Kind::kCallable: {
      const CallableData& callable = value.callable();
      if (callable.type == CallableData::Type::kMacro) {
        absl::StrAppend(&out, "<Macro ", PythonStringRepr(callable.name), ">");
      } else if (callable.type == CallableData::Type::kGlobal) {
        absl::StrAppend(&out, "<function ", callable.name, ">");
      } else {
        absl::StrAppend(&out, "<built-in method ", callable.name, " of ",
                        TypeName(*callable.receiver), " object>");
      }
      return;
    }
  }
}

bool EqualsAt(const Value& left, const Value& right, int depth) {
  if (depth > kMaxNesting) return false;
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return left.number_value() == right.number_value();
    return left.int_value() == right.int_value();
  }
  if (left.kind() != right.kind()) return false;
  switch (left.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return left.string_value() == right.string_value();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const auto& a = left.items();
      const auto& b = right.items();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!EqualsAt(a[i], b[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const auto& a = left.dict().entries;
      if (a.size() != right.dict().entries.size()) return false;
      for (const auto& [key, value] : a) {
        const Value* other = right.dict().Find(key);
        if (other == nullptr || !EqualsAt(value, *other, depth + 1)) return false;
      }
      return true;
    }
    default:
      return left.SameObject(right);
  }
}

absl::StatusOr<bool> LessThanAt(const Value& left, const Value& right, int depth) {
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return left.number_value() < right.number_value();
    return left.int_value() < right.int_value();
  }
  if (left.is_string() && right.is_string()) return left.string_value() < right.string_value();
  if (depth <= kMaxNesting && left.kind() == right.kind() && left.is_sequence()) {
    const auto& a = left.items();
    const auto& b = right.items();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (EqualsAt(a[i], b[i], depth + 1)) continue;
      return LessThanAt(a[i], b[i], depth + 1);
    }
    return a.size() < b.size();
  }
  return absl::InvalidArgumentError(StrCat("'<' not supported between instances of '",
                                           TypeName(left), "' and '", TypeName(right), "'"));
}

template <typename Json>
Value FromJsonImpl(const Json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t value = json.template get<uint64_t>();
      if (value <= static_cast<uint64_t>(INT64_MAX)) return Value::Int(static_cast<int64_t>(value));
      return Value::Float(static_cast<double>(value));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJsonImpl(item));
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto dict = std::make_shared<DictData>();
      dict->entries.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        dict->entries.emplace_back(Value::String(it.key()), FromJsonImpl(it.value()));
      }
      return Value::Dict(std::move(dict));
    }
    default:
      return Value::None();
  }
}

void AppendJsonString(std::string_view text, std::string& out, bool ensure_ascii = false) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  const auto escape_unit = [&](unsigned unit) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out.push_back(kHex[(unit >> shift) & 15]);
  };
  for (size_t pos = 0; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (ensure_ascii && static_cast<unsigned char>(c) >= 0x80) {
      size_t length = 0;
      const char32_t code_point = CodePointAt(text, pos, &length);
      pos += length - 1;
      if (code_point >= 0x10000) {
        const char32_t offset = code_point - 0x10000;
        escape_unit(0xD800 + (offset >> 10));
        escape_unit(0xDC00 + (offset & 0x3FF));
      } else {
        escape_unit(code_point);
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out.push_back(kHex[(c >> 4) & 15]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

std::string JsonFloat(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return PythonFloatRepr(value);
}

absl::Status AppendJson(const Value& value, const JsonDumpOptions& options, int level,
                        std::string& out) {
  if (level > kMaxNesting) return absl::InvalidArgumentError("Circular reference detected");
  if (out.size() > options.max_bytes) {
    return absl::ResourceExhaustedError(
        StrCat("tojson output exceeds max_output_bytes (", options.max_bytes, ")"));
  }
  const auto newline = [&](int at_level) {
    out.push_back('\n');
    for (int i = 0; i < at_level; ++i) out += *options.indent;
  };
  switch (value.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      out += value.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(&out, value.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat:
      out += JsonFloat(value.number_value());
      return absl::OkStatus();
    case Value::Kind::kString:
      AppendJsonString(value.string_value(), out, options.ensure_ascii);
      return absl::OkStatus();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const auto& items = value.items();
      if (items.empty()) {
        out += "[]";
        return absl::OkStatus();
      }
      out += "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += options.item_separator;
        if (options.indent) newline(level + 1);
        RETURN_IF_ERROR(AppendJson(items[i], options, level + 1, out));
      }
      if (options.indent) newline(level);
      out += "]";
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : value.dict().entries) entries.push_back(&entry);
      if (entries.empty()) {
        out += "{}";
        return absl::OkStatus();
      }
      if (options.sort_keys) {
        absl::Status status;
        std::stable_sort(entries.begin(), entries.end(), [&](const auto* a, const auto* b) {
          absl::StatusOr<bool> less = LessThan(a->first, b->first);
          if (!less.ok()) {
            status = less.status();
            return false;
          }
          return *less;
        });
        RETURN_IF_ERROR(status);
      }
      out += "{";
      bool first = true;
      for (const auto* entry : entries) {
        if (!first) out += options.item_separator;
        first = false;
        if (options.indent) newline(level + 1);
        const Value& key = entry->first;
        if (key.is_string()) {
          AppendJsonString(key.string_value(), out, options.ensure_ascii);
        } else if (key.is_float()) {
          AppendJsonString(JsonFloat(key.number_value()), out);
        } else if (key.is_bool()) {
          AppendJsonString(key.bool_value() ? "true" : "false", out);
        } else if (key.is_none()) {
          AppendJsonString("null", out);
        } else if (key.is_int()) {
          AppendJsonString(StrCat(key.int_value()), out);
        } else {
          return absl::InvalidArgumentError(
              StrCat("keys must be str, int, float, bool or None, not ", TypeName(key)));
        }
        out += options.key_separator;
        RETURN_IF_ERROR(AppendJson(entry->second, options, level + 1, out));
      }
      if (options.indent) newline(level);
      out += "}";
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          StrCat("Object of type ", TypeName(value), " is not JSON serializable"));
  }
}

}  // namespace

std::string ToStr(const Value& value) {
  if (value.is_string()) return value.string_value();
  std::string out;
  AppendRepr(value, 0, true, out);
  return out;
}

std::string ToRepr(const Value& value) {
  std::string out;
  AppendRepr(value, 0, false, out);
  return out;
}

bool Equals(const Value& left, const Value& right) { return EqualsAt(left, right, 0); }

absl::StatusOr<bool> LessThan(const Value& left, const Value& right) {
  return LessThanAt(left, right, 0);
}

Value FromJson(const nlohmann::ordered_json& json) { return FromJsonImpl(json); }
Value FromJson(const nlohmann::json& json) { return FromJsonImpl(json); }

absl::StatusOr<std::string> ToJson(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  RETURN_IF_ERROR(AppendJson(value, options, 0, out));
  return out;
}

}  // namespace attnserve::jinja
