// The values a template computes with, with Python's semantics (templates are written against
// jinja2, which evaluates them as Python objects): undefined, none, bool, 64-bit int, float,
// string, list, tuple, insertion-ordered dict, namespace/loop objects and callables.
//
// Strings, lists and dicts are shared by reference as in Python, so that copying a value costs
// nothing and `list.pop()` is seen through every name bound to the list.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace attnserve::jinja {

class Value;
struct Node;
class Scope;

struct ListData {
  std::vector<Value> items;
};

struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  // The value under `key` (Python equality: 1 and 1.0 and True are one key), or nullptr.
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(Value key, Value value);
};

// Objects with named attributes: namespace() (assignable with `set ns.x = ...`) and `loop`.
struct ObjectData {
  enum class Type { kNamespace, kLoop, kCycler, kJoiner };
  Type type = Type::kNamespace;
  std::vector<std::pair<std::string, Value>> attributes;
  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value value);
};

// Something a template can call: a macro it defined, a global function, or a method bound to
// its receiver. The evaluator does the calling (it owns the budgets).
struct CallableData {
  enum class Type { kMacro, kGlobal, kMethod };
  Type type = Type::kGlobal;
  std::string name;
  std::shared_ptr<Value> receiver;     // kMethod
  const Node* macro = nullptr;         // kMacro: the macro statement
  std::shared_ptr<Scope> macro_scope;  // kMacro: where it was defined
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kObject,
    kCallable,
  };

  Value() = default;  // undefined
  // An undefined value; `message` is the error that using it wrongly reports (jinja2's hint,
  // e.g. "'x' is undefined"); `unsafe` marks the sandbox's refusal (calling it is an error).
  static Value Undefined(std::string message, bool unsafe = false);
  static Value None();
  static Value Bool(bool value);
  static Value Int(int64_t value);
  static Value Float(double value);
  static Value String(std::string value);
  static Value List(std::vector<Value> items);
  static Value Tuple(std::vector<Value> items);
  static Value Dict(std::shared_ptr<DictData> dict);
  static Value EmptyDict();
  static Value Object(std::shared_ptr<ObjectData> object);
  static Value Callable(std::shared_ptr<CallableData> callable);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // int or bool (Python's bool is an int) or float.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_integral() const { return is_int() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool bool_value() const { return scalar_.boolean; }
  // int or bool as an int.
  int64_t int_value() const { return is_bool() ? (scalar_.boolean ? 1 : 0) : scalar_.integer; }
  // Any number as a double.
  double number_value() const { return is_float() ? scalar_.real : double(int_value()); }
  const std::string& string_value() const;
  // The undefined value's error message, and whether it is a sandbox refusal.
  const std::string& undefined_message() const;
  bool undefined_unsafe() const { return scalar_.boolean; }
  std::vector<Value>& items() const;  // list or tuple
  DictData& dict() const;
  ObjectData& object() const;
  CallableData& callable() const;
  // Whether two values are the same object (`is sameas`).
  bool SameObject(const Value& other) const;

 private:
  Kind kind_ = Kind::kUndefined;
  union {
    bool boolean;
    int64_t integer;
    double real;
  } scalar_ = {.integer = 0};
  std::shared_ptr<void> ref_;
};

// Python's truth value.
bool Truthy(const Value& value);
// Python's type name, as jinja2's messages use it ("str", "int", "list", "dict", "NoneType").
std::string TypeName(const Value& value);
// str(value) (what {{ }} prints: undefined prints nothing) and repr(value).
std::string ToStr(const Value& value);
std::string ToRepr(const Value& value);
// Python's ==.
bool Equals(const Value& left, const Value& right);
// Python's <: an error for types Python does not order (e.g. str < int).
absl::StatusOr<bool> LessThan(const Value& left, const Value& right);

// JSON from the request. Objects keep their key order with ordered_json.
Value FromJson(const nlohmann::ordered_json& json);
Value FromJson(const nlohmann::json& json);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // json.dumps' indent, as the string of one level
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;    // \uXXXX escapes for everything outside ASCII
  size_t max_bytes = SIZE_MAX;  // an error once the text would be longer
};
// Python's json.dumps(value, ensure_ascii=False, ...): key order kept, floats as repr.
absl::StatusOr<std::string> ToJson(const Value& value, const JsonDumpOptions& options);

}  // namespace attnserve::jinja
