// RETURN_IF_ERROR and ASSIGN_OR_RETURN: propagate an absl::Status or absl::StatusOr to the
// caller without writing the check by hand, as TensorFlow's TF_RETURN_IF_ERROR and Triton's
// RETURN_IF_ERROR are used.
//
//   RETURN_IF_ERROR(norm.Apply(h, h));                      // a Status or a StatusOr
//   ASSIGN_OR_RETURN(Tensor logits, LinearRows(h, lm_head_));  // declares logits
//   ASSIGN_OR_RETURN(model->lm_head_, LoadLmHead(...));      // assigns an existing lvalue
//
// Why macros: the point is to return from the *calling* function, and a function cannot make its
// caller return. Each macro evaluates its expression exactly once, returns the status unchanged
// (no message is added; wrap it yourself where a message needs context), and, for
// ASSIGN_OR_RETURN, moves the value out, so move-only types work. They work in any function
// whose return type an absl::Status converts to: absl::Status and absl::StatusOr<T>.
//
// RETURN_IF_ERROR is one statement and may be the body of an if or else without braces.
// ASSIGN_OR_RETURN must be able to declare a variable in the enclosing scope, so it expands to
// several statements: inside an if or else without braces it does not compile (its temporary
// is out of scope on the next line), so put braces around it there.
//
// The left-hand side of ASSIGN_OR_RETURN must not contain a comma outside parentheses
// (`std::pair<int, int> p`): use `auto p` or an alias. The expression may.
//
// Helpers are prefixed ATTN_ (macros) or live in attnserve::status_macros_internal.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attnserve::status_macros_internal {

// The status of a Status or StatusOr, moved out of an rvalue and copied from an lvalue (which
// costs nothing for an OK status).
inline absl::Status StatusOf(const absl::Status& status) { return status; }
inline absl::Status StatusOf(absl::Status&& status) { return std::move(status); }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}
template <typename T>
absl::Status StatusOf(absl::StatusOr<T>&& result) {
  return std::move(result).status();
}

}  // namespace attnserve::status_macros_internal

#define ATTN_STATUS_CONCAT_INNER(a, b) a##b
#define ATTN_STATUS_CONCAT(a, b) ATTN_STATUS_CONCAT_INNER(a, b)

// do/while(0) makes the expansion one statement that takes the caller's semicolon, so an
// if/else around it without braces parses as written.
#define RETURN_IF_ERROR(...)                                                                  \
  do {                                                                                        \
    ::absl::Status attn_status_ = ::attnserve::status_macros_internal::StatusOf(__VA_ARGS__); \
    if (!attn_status_.ok()) [[unlikely]] {                                                    \
      return attn_status_;                                                                    \
    }                                                                                         \
  } while (false)

// A temporary with a name unique in the translation unit (__COUNTER__), so that two uses in one
// scope, or on one line, do not collide.
#define ASSIGN_OR_RETURN(lhs, ...) \
  ATTN_ASSIGN_OR_RETURN_IMPL(ATTN_STATUS_CONCAT(attn_status_or_, __COUNTER__), lhs, __VA_ARGS__)

#define ATTN_ASSIGN_OR_RETURN_IMPL(result, lhs, ...) \
  auto result = (__VA_ARGS__);                       \
  if (!result.ok()) [[unlikely]] {                   \
    return std::move(result).status();               \
  }                                                  \
  lhs = *std::move(result)
