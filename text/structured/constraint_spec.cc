#include "text/structured/constraint_spec.h"

namespace attnserve::structured {

const char* KindName(ConstraintSpec::Kind kind) {
  switch (kind) {
    case ConstraintSpec::Kind::kJsonObject:
      return "json_object";
    case ConstraintSpec::Kind::kJsonSchema:
      return "json_schema";
    case ConstraintSpec::Kind::kRegex:
      return "regex";
    case ConstraintSpec::Kind::kLark:
      return "lark";
    case ConstraintSpec::Kind::kGbnf:
      return "gbnf";
    case ConstraintSpec::Kind::kChoice:
      return "choice";
  }
  return "constraint";
}

}  // namespace attnserve::structured
