#include "server/http/openai/openai_constraints.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/http/json_fields.h"

namespace attnserve::server {
namespace {

using json = nlohmann::ordered_json;
using Kind = structured::ConstraintSpec::Kind;
using Constraint = GenerateInput::Constraint;

Constraint Make(Kind kind, std::string text, std::string field) {
  return {.spec = {.kind = kind, .text = std::move(text), .choices = {}},
          .field = std::move(field)};
}

// A schema given as a JSON object (or, as vLLM also takes it, as a JSON string).
absl::StatusOr<Constraint> Schema(const json& value, const std::string& field) {
  if (value.is_string()) return Make(Kind::kJsonSchema, value.get<std::string>(), field);
  if (!value.is_object() && !value.is_boolean()) {
    return InvalidField(field, "must be a JSON schema (an object)");
  }
  return Make(Kind::kJsonSchema, value.dump(-1, ' ', false, json::error_handler_t::replace), field);
}

absl::StatusOr<Constraint> Text(const json& value, Kind kind, const std::string& field) {
  if (!value.is_string()) return InvalidField(field, "must be a string");
  return Make(kind, value.get<std::string>(), field);
}

// A grammar as vLLM and llama.cpp send it: GBNF (rules with `::=`), else Lark.
absl::StatusOr<Constraint> Grammar(const json& value, const std::string& field) {
  if (!value.is_string()) return InvalidField(field, "must be a string");
  const std::string text = value.get<std::string>();
  return Make(absl::StrContains(text, "::=") ? Kind::kGbnf : Kind::kLark, text, field);
}

absl::StatusOr<Constraint> Choice(const json& value, const std::string& field) {
  if (!value.is_array() || value.empty()) return InvalidField(field, "must be a list of strings");
  Constraint choice = Make(Kind::kChoice, "", field);
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string())
      return InvalidField(absl::StrCat(field, "[", i, "]"), "must be a string");
    choice.spec.choices.push_back(value[i].get<std::string>());
  }
  return choice;
}

absl::StatusOr<std::optional<Constraint>> ResponseFormat(const json& format) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
    return InvalidField("response_format", "must be an object with a \"type\"");
  }
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    // llama.cpp's server takes a schema here too.
    if (auto schema = format.find("schema"); schema != format.end() && !schema->is_null()) {
      return Schema(*schema, "response_format.schema");
    }
    return Make(Kind::kJsonObject, "", "response_format");
  }
  if (type == "json_schema") {
    const auto spec = format.find("json_schema");
    if (spec == format.end() || !spec->is_object()) {
      return InvalidField("response_format.json_schema", "must be an object with a \"schema\"");
    }
    const auto schema = spec->find("schema");
    // OpenAI's own default when the schema is left out: any JSON object.
    if (schema == spec->end() || schema->is_null()) {
      return Make(Kind::kJsonObject, "", "response_format.json_schema");
    }
    return Schema(*schema, "response_format.json_schema.schema");
  }
  return InvalidField("response_format.type",
                      "must be \"text\", \"json_object\" or \"json_schema\"");
}

// vLLM's `structured_outputs` object: one of json, regex, grammar, choice, json_object.
absl::StatusOr<std::optional<Constraint>> StructuredOutputs(const json& value) {
  if (!value.is_object()) return InvalidField("structured_outputs", "must be an object");
  std::vector<Constraint> found;
  for (const auto& [key, entry] : value.items()) {
    if (entry.is_null()) continue;
    const std::string field = "structured_outputs." + key;
    absl::StatusOr<Constraint> constraint;
    if (key == "json") {
      constraint = Schema(entry, field);
    } else if (key == "regex") {
      constraint = Text(entry, Kind::kRegex, field);
    } else if (key == "grammar") {
      constraint = Grammar(entry, field);
    } else if (key == "choice") {
      constraint = Choice(entry, field);
    } else if (key == "json_object") {
      if (!entry.is_boolean()) return InvalidField(field, "must be true or false");
      if (!entry.get<bool>()) continue;
      constraint = Make(Kind::kJsonObject, "", field);
    } else {
      continue;  // vLLM's backend options and the like
    }
    if (!constraint.ok()) return constraint.status();
    found.push_back(*std::move(constraint));
  }
  if (found.size() > 1) {
    return InvalidField("structured_outputs",
                        "may hold one of json, regex, grammar, choice or json_object");
  }
  if (found.empty()) return std::nullopt;
  return found.front();
}

}  // namespace

absl::StatusOr<std::optional<Constraint>> ReadConstraint(const json& body) {
  std::vector<Constraint> found;
  const auto add = [&](absl::StatusOr<std::optional<Constraint>> constraint) -> absl::Status {
    if (!constraint.ok()) return constraint.status();
    if (*constraint) found.push_back(**std::move(constraint));
    return absl::OkStatus();
  };
  const auto field = [&](const char* name) { return FindField(body, name); };
  absl::Status status;
  if (const json* value = field("response_format")) status.Update(add(ResponseFormat(*value)));
  if (const json* value = field("structured_outputs"))
    status.Update(add(StructuredOutputs(*value)));
  if (const json* value = field("guided_json")) status.Update(add(Schema(*value, "guided_json")));
  if (const json* value = field("guided_regex")) {
    status.Update(add(Text(*value, Kind::kRegex, "guided_regex")));
  }
  if (const json* value = field("guided_grammar"))
    status.Update(add(Grammar(*value, "guided_grammar")));
  if (const json* value = field("guided_choice"))
    status.Update(add(Choice(*value, "guided_choice")));
  if (const json* value = field("grammar")) status.Update(add(Grammar(*value, "grammar")));
  if (const json* value = field("json_schema")) status.Update(add(Schema(*value, "json_schema")));
  if (!status.ok()) return status;
  if (found.size() > 1) {
    std::vector<std::string> fields;
    for (const Constraint& constraint : found) fields.push_back(constraint.field);
    return InvalidField(found[1].field, absl::StrCat("cannot be given with ", found[0].field,
                                                     ": one constraint per request (",
                                                     absl::StrJoin(fields, ", "), ")"));
  }
  if (found.empty()) return std::nullopt;
  return found.front();
}

}  // namespace attnserve::server
