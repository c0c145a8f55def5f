// llama.cpp's GBNF grammars (its grammars/README.md) in the Lark syntax llguidance compiles, so
// that a `grammar` sent to llama.cpp's server means the same here: rules `name ::= ...` ending
// at a newline (except after `|` or inside parentheses), string literals and character classes
// with \x, \u, \U, \t, \r, \n escapes, `.`, groups, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`,
// `#` comments, and `root` as the start.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace attnserve::structured {

// INVALID_ARGUMENT names the line and column of the first error.
absl::StatusOr<std::string> GbnfToLark(std::string_view gbnf);

}  // namespace attnserve::structured
