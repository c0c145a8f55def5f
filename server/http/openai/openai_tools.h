// OpenAI's tool calling on the request side: `tools`, `tool_choice` (none, auto, required or a
// named function) and `parallel_tool_calls`, validated; the constraint a required or named call
// puts on the answer, as vLLM constrains it (a named function's answer is its arguments, a
// required call's is a JSON list of {"name", "parameters"}); and the assistant's earlier
// tool_calls with their arguments as objects, which is how chat templates read them.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/frontend/method_inputs.h"

namespace attnserve::server {

struct ToolRequest {
  enum class Choice { kNone, kAuto, kRequired, kFunction };
  nlohmann::ordered_json tools;  // the validated list, or null
  Choice choice = Choice::kAuto;
  std::string function;  // kFunction's name
  bool parallel = true;
  bool any() const { return tools.is_array() && !tools.empty() && choice != Choice::kNone; }
};

// INVALID_ARGUMENT names the field: a tool that is not {"type": "function", "function": {"name",
// "parameters"?}}, a tool_choice naming no listed function, a choice without tools.
absl::StatusOr<ToolRequest> ReadTools(const nlohmann::ordered_json& body);

// The constraint of a required call or a named function; none for auto and none.
std::optional<GenerateInput::Constraint> ToolConstraint(const ToolRequest& request);

// Assistant messages' tool_calls[i].function.arguments parsed from their JSON text into objects
// (left as they are when they do not parse).
void ArgumentsAsObjects(nlohmann::ordered_json& messages);

}  // namespace attnserve::server
