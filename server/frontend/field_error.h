// A refusal that names the request field at fault, in the carrying protocol's words: the message
// says it for people, and a payload keeps it for the protocols that report it apart (OpenAI's
// error `param`).
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace attnserve::server {

inline constexpr absl::string_view kFieldPayload = "type.attnserve.dev/field";

// INVALID_ARGUMENT: "<field> <problem>", with the field kept apart.
inline absl::Status FieldError(absl::string_view field, absl::string_view problem,
                               absl::string_view quote = "") {
  absl::Status status = absl::InvalidArgumentError(absl::StrCat(quote, field, quote, " ", problem));
  status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

// The field a refusal names, if it names one.
inline std::optional<std::string> ErrorField(const absl::Status& status) {
  auto field = status.GetPayload(kFieldPayload);
  if (!field) return std::nullopt;
  return std::string(*field);
}

}  // namespace attnserve::server
