// The "Sequence" of tokenizer.json's components: json[key], an array of components parsed one by
// one (null entries, which mean none, are skipped). Errors name `part`.key.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace attnserve {

template <typename Component>
absl::StatusOr<std::vector<std::unique_ptr<Component>>> ParseSteps(
    const nlohmann::json& json, const char* part, const char* key,
    absl::StatusOr<std::unique_ptr<Component>> (*parse)(const nlohmann::json&)) {
  if (!json.contains(key) || !json[key].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(part, ".", key, ": an array is required"));
  }
  std::vector<std::unique_ptr<Component>> steps;
  for (const nlohmann::json& step : json[key]) {
    ASSIGN_OR_RETURN(std::unique_ptr<Component> component, parse(step));
    if (component) steps.push_back(std::move(component));
  }
  return steps;
}

}  // namespace attnserve
