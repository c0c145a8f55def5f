// Parses a template into the tree of jinja_ast.h with jinja2 3.1's grammar (its precedences,
// its `is` tests, its tuple and slice rules). What the engine does not implement is refused
// here, before any rendering, naming the line: unknown or unsupported tags (include, extends,
// import, block, call, ...), unknown filters and tests, calls of functions that are neither
// globals nor defined by the template, `*args`/`**kwargs`, recursive loops.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "text/chat_template/jinja_ast.h"

namespace attnserve::jinja {

// The global functions templates may call.
bool IsGlobalFunction(std::string_view name);

// Errors are InvalidArgument "<origin>:<line>: <what>".
absl::StatusOr<std::unique_ptr<Node>> ParseTemplate(std::string_view source,
                                                    std::string_view origin);

}  // namespace attnserve::jinja
