// Python's string formatting as templates use it: str.replace, str.format (positional and
// named fields, !r/!s, and the common format specs) and printf-style `%` (%s %r %d %i %f %x %%).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "text/chat_template/jinja_filters.h"
#include "text/chat_template/jinja_value.h"

namespace attnserve::jinja {

// str.replace(old, new, count); the result's size is checked before it is built.
absl::StatusOr<std::string> PythonReplace(FilterHost& host, std::string_view text,
                                          std::string_view old_text, std::string_view new_text,
                                          int64_t count);
// str.format(*args, **kwargs).
absl::StatusOr<std::string> PythonStrFormat(FilterHost& host, std::string_view format,
                                            const CallArgs& args);
// format % values, where values is a tuple (several), a dict (%(name)s) or one value.
absl::StatusOr<std::string> PythonPercentFormat(FilterHost& host, std::string_view format,
                                                const Value& values);

}  // namespace attnserve::jinja
