// What every reader of the HTTP APIs' JSON request bodies shares: finding a field, reading one
// of a type, and refusing one by name (the field quoted, and set as an OpenAI error's `param`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/frontend/field_error.h"
#include "server/frontend/method_inputs.h"

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

absl::StatusOr<std::string> RequiredString(const nlohmann::ordered_json& body,
                                           const std::string& name);
absl::StatusOr<bool> Bool(const nlohmann::ordered_json& body, const std::string& name,
                          bool otherwise);
absl::StatusOr<int64_t> Int(const nlohmann::ordered_json& body, const std::string& name,
                            int64_t otherwise, int64_t min, int64_t max);
absl::StatusOr<float> Number(const nlohmann::ordered_json& body, const std::string& name,
                             float otherwise);
// A string or a list of strings (`most` at most), as a list.
absl::StatusOr<std::vector<std::string>> Strings(const nlohmann::ordered_json& body,
                                                 const std::string& name, size_t most);
// A token id list: integers in int64's range (the vocabulary is checked by validation).
absl::StatusOr<std::vector<int64_t>> TokenIds(const nlohmann::ordered_json& list,
                                              const std::string& name);
// Sequences as OpenAI's prompt and input and TEI's inputs take them: a string, a list of strings,
// a list of token ids, or a list of lists of token ids (`max_sequences` at most).
absl::StatusOr<std::vector<SequenceInput>> Sequences(const nlohmann::ordered_json& body,
                                                     const std::string& name,
                                                     int64_t max_sequences);

}  // namespace attnserve::server
