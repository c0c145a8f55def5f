// What a request constrains a generated answer to, as every protocol's edge reads it: any JSON
// object, a JSON schema, a regular expression, a grammar (Lark as llguidance takes it, or
// llama.cpp's GBNF), or one of a list of strings.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace attnserve::structured {

struct ConstraintSpec {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kLark, kGbnf, kChoice };
  Kind kind = Kind::kJsonObject;
  std::string text;                  // the schema (JSON text), regex or grammar
  std::vector<std::string> choices;  // kChoice
};

// "json_object", "json_schema", "regex", "lark", "gbnf", "choice": for messages and metrics.
const char* KindName(ConstraintSpec::Kind kind);

}  // namespace attnserve::structured
