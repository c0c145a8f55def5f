// What an OpenAI-style request constrains its answer to, in each dialect clients send:
// OpenAI's `response_format` (json_object, json_schema), vLLM's `structured_outputs` and
// `guided_json` / `guided_regex` / `guided_grammar` / `guided_choice`, and llama.cpp's
// `grammar` (GBNF) and `json_schema` (docs/structured-outputs.md). At most one may be given.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "absl/status/statusor.h"
#include "server/frontend/method_inputs.h"

namespace attnserve::server {

// None when the request sets no constraint (or `response_format` {"type": "text"}).
// INVALID_ARGUMENT names the field whose shape is wrong; the constraint itself is compiled, and
// its errors named, at validation.
absl::StatusOr<std::optional<GenerateInput::Constraint>> ReadConstraint(
    const nlohmann::ordered_json& body);

}  // namespace attnserve::server
