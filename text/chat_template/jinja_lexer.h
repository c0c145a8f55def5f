// Splits a template into tokens exactly as jinja2 3.1's lexer does with transformers' settings
// (trim_blocks and lstrip_blocks on, `-`/`+` whitespace control, raw blocks, newlines
// normalized to "\n" and one trailing newline dropped), so that the whitespace a template
// renders is jinja2's to the byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::jinja {

enum class TokenKind {
  kData,           // text outside tags, after whitespace control
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,   // text holds the decoded value
  kInteger,  // integer holds the value
  kFloat,    // real holds the value
  kOperator,
  kEnd,  // end of the template
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int64_t integer = 0;
  double real = 0;
  int line = 1;
};

// Errors are InvalidArgument "<origin>:<line>: <what>".
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, std::string_view origin);

}  // namespace attnserve::jinja
