// jinja2 3.1's filters and tests (with transformers' tojson), on jinja_value.h's values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "text/chat_template/jinja_value.h"

namespace attnserve::jinja {

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;

  // The argument at `index` or under `keyword`, or nullptr.
  const Value* Find(size_t index, std::string_view keyword) const;
  // An error when there are more positional arguments than `max_positional` or a keyword
  // outside `allowed` (jinja2's TypeError for a wrong call).
  absl::Status Check(std::string_view function, size_t max_positional,
                     std::initializer_list<std::string_view> allowed) const;
};

// What filters need from the evaluator: its budgets, attribute access, and the other filters
// and tests (map and select take their names).
class FilterHost {
 public:
  virtual ~FilterHost() = default;
  // Charges `steps` evaluation steps; ResourceExhausted past the limit.
  virtual absl::Status Charge(int64_t steps) = 0;
  // ResourceExhausted when a string of `bytes` would be past the output limit.
  virtual absl::Status CheckSize(size_t bytes) = 0;
  // The most bytes a string may have (the output limit).
  virtual size_t MaxBytes() const = 0;
  virtual absl::StatusOr<Value> GetAttribute(const Value& object, std::string_view name) = 0;
  virtual absl::StatusOr<Value> GetItem(const Value& object, const Value& key) = 0;
  virtual absl::StatusOr<Value> Filter(std::string_view name, const Value& operand,
                                       const CallArgs& args) = 0;
  virtual absl::StatusOr<bool> Test(std::string_view name, const Value& operand,
                                    const CallArgs& args) = 0;
};

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

absl::StatusOr<Value> ApplyFilter(FilterHost& host, std::string_view name, const Value& operand,
                                  const CallArgs& args);
absl::StatusOr<bool> ApplyTest(FilterHost& host, std::string_view name, const Value& operand,
                               const CallArgs& args);

// Python's `item in container`.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

// The items a for loop (or list()) takes from a value: a list's items, a dict's keys, a
// string's characters; nothing from undefined; an error for what Python cannot iterate.
absl::StatusOr<std::vector<Value>> Iterate(const Value& value);

}  // namespace attnserve::jinja
