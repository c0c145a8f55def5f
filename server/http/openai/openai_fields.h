// What every reader of the OpenAI API's request bodies shares: finding a field, and refusing one
// by name in OpenAI's shape (the field quoted, and set as the error's `param`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "server/frontend/field_error.h"

namespace attnserve::server {

inline absl::Status InvalidField(const std::string& field, const std::string& problem) {
  return FieldError(field, problem, "'");
}

// A field that is absent or null reads as absent.
inline const nlohmann::ordered_json* FindField(const nlohmann::ordered_json& body,
                                               const std::string& name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace attnserve::server
