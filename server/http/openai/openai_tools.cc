#include "server/http/openai/openai_tools.h"

#include "absl/strings/str_cat.h"
#include "server/http/json_fields.h"

namespace attnserve::server {
namespace {

using json = nlohmann::ordered_json;

// A function's parameters schema; a function without one takes an object of anything.
json Parameters(const json& tool) {
  const json& function = tool["function"];
  const auto parameters = function.find("parameters");
  if (parameters == function.end() || parameters->is_null()) return {{"type", "object"}};
  return *parameters;
}

}  // namespace

absl::StatusOr<ToolRequest> ReadTools(const json& body) {
  ToolRequest request;
  if (const json* tools = FindField(body, "tools")) {
    if (!tools->is_array()) return InvalidField("tools", "must be a list");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string name = absl::StrCat("tools[", i, "]");
      if (!tool.is_object() || tool.value("type", "") != "function" || !tool.contains("function") ||
          !tool["function"].is_object()) {
        return InvalidField(name, "must be {\"type\": \"function\", \"function\": {...}}");
      }
      const json& function = tool["function"];
      if (!function.contains("name") || !function["name"].is_string() ||
          function["name"].get<std::string>().empty()) {
        return InvalidField(name + ".function.name", "must be a non-empty string");
      }
      if (const json* parameters = FindField(function, "parameters");
          parameters != nullptr && !parameters->is_object()) {
        return InvalidField(name + ".function.parameters", "must be a JSON schema (an object)");
      }
    }
    request.tools = *tools;
  }
  const bool listed = request.tools.is_array() && !request.tools.empty();
  if (const json* choice = FindField(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::string mode = choice->get<std::string>();
      if (mode == "none") {
        request.choice = ToolRequest::Choice::kNone;
      } else if (mode == "auto") {
        request.choice = ToolRequest::Choice::kAuto;
      } else if (mode == "required") {
        request.choice = ToolRequest::Choice::kRequired;
      } else {
        return InvalidField("tool_choice",
                            "must be \"none\", \"auto\", \"required\" or a function");
      }
    } else if (choice->is_object() && choice->value("type", "") == "function" &&
               choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") &&
               (*choice)["function"]["name"].is_string()) {
      request.choice = ToolRequest::Choice::kFunction;
      request.function = (*choice)["function"]["name"].get<std::string>();
      bool found = false;
      for (const json& tool : request.tools) found |= tool["function"]["name"] == request.function;
      if (!found) {
        return InvalidField("tool_choice.function.name",
                            absl::StrCat("names '", request.function.substr(0, 64),
                                         "', which is not among the tools"));
      }
    } else {
      return InvalidField("tool_choice",
                          "must be \"none\", \"auto\", \"required\" or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (!listed && request.choice != ToolRequest::Choice::kNone &&
        request.choice != ToolRequest::Choice::kAuto) {
      return InvalidField("tool_choice", "needs \"tools\"");
    }
  }
  if (const json* parallel = FindField(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean())
      return InvalidField("parallel_tool_calls", "must be true or false");
    request.parallel = parallel->get<bool>();
  }
  return request;
}

std::optional<GenerateInput::Constraint> ToolConstraint(const ToolRequest& request) {
  using Kind = structured::ConstraintSpec::Kind;
  const auto schema = [](const json& value, const char* field) {
    return GenerateInput::Constraint{
        .spec = {.kind = Kind::kJsonSchema,
                 .text = value.dump(-1, ' ', false, json::error_handler_t::replace),
                 .choices = {}},
        .field = field};
  };
  if (request.choice == ToolRequest::Choice::kFunction) {
    for (const json& tool : request.tools) {
      if (tool["function"]["name"] == request.function) {
        return schema(Parameters(tool), "tool_choice");
      }
    }
  }
  if (request.choice != ToolRequest::Choice::kRequired || !request.any()) return std::nullopt;
  json calls = json::array();
  for (const json& tool : request.tools) {
    calls.push_back(
        {{"type", "object"},
         {"properties",
          {{"name", {{"const", tool["function"]["name"]}}}, {"parameters", Parameters(tool)}}},
         {"required", {"name", "parameters"}},
         {"additionalProperties", false}});
  }
  json list = {{"type", "array"}, {"items", {{"anyOf", std::move(calls)}}}, {"minItems", 1}};
  if (!request.parallel) list["maxItems"] = 1;
  return schema(list, "tool_choice");
}

void ArgumentsAsObjects(json& messages) {
  for (json& message : messages) {
    if (!message.is_object()) continue;
    const auto calls = message.find("tool_calls");
    if (calls == message.end() || !calls->is_array()) continue;
    for (json& call : *calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
        continue;
      }
      json& function = call["function"];
      const auto arguments = function.find("arguments");
      if (arguments == function.end() || !arguments->is_string()) continue;
      json parsed = json::parse(arguments->get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) *arguments = std::move(parsed);
    }
  }
}

}  // namespace attnserve::server
