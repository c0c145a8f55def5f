// Attribute and item access with jinja2's sandboxed semantics, and the Python methods templates
// call on strings, dicts, lists and loops (`message.content.strip()`, `tool.get("x")`).
//
// As in jinja2's ImmutableSandboxedEnvironment, the methods that change a list or dict in place
// (append, extend, insert, remove, reverse, sort, update, setdefault, pop on dicts, ...) are
// refused when called; list.pop and list.clear are not in its list and work.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "text/chat_template/jinja_filters.h"
#include "text/chat_template/jinja_value.h"

namespace attnserve::jinja {

// environment.getattr(object, name): a method of the object's type first, then the item;
// undefined when neither exists; an error only on an undefined object.
absl::StatusOr<Value> GetAttribute(const Value& object, std::string_view name);
// environment.getitem(object, key): the item first, then (for a string key) the attribute.
absl::StatusOr<Value> GetItem(const Value& object, const Value& key);
// object[start:stop:step] by Python's rules (strings by code point); undefined for what Python
// cannot slice.
absl::StatusOr<Value> Slice(const Value& object, const Value& start, const Value& stop,
                            const Value& step);

// Calls the method bound in `method` (a kMethod callable).
absl::StatusOr<Value> CallMethod(FilterHost& host, const CallableData& method,
                                 const CallArgs& args);

// Python's str.split(sep, maxsplit) and str.splitlines(), shared with the filters.
std::vector<std::string> PythonSplit(std::string_view text, const std::string* separator,
                                     int64_t max_split);
std::vector<std::string> PythonSplitLines(std::string_view text, bool keep_ends);
// str.strip/lstrip/rstrip with optional characters.
std::string PythonStrip(std::string_view text, const std::string* chars, bool left, bool right);

}  // namespace attnserve::jinja
