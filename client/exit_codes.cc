#include "client/exit_codes.h"

namespace attnserve::client {

ExitCode ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitInvalidRequest;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    case absl::StatusCode::kDeadlineExceeded:
      return kExitDeadline;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitAccess;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
      return kExitUnsupported;
    default:
      return kExitOther;
  }
}

const char* ExitCodeHelp() {
  return R"(Exit codes:
  0  success
  1  any other error
  2  usage: unknown command or flag, missing or malformed value, unreadable TLS file
  3  the server refused the request's content (INVALID_ARGUMENT, OUT_OF_RANGE)
  4  no such model (NOT_FOUND)
  5  the server is unreachable, overloaded or draining, even after retries, or the TLS
     handshake failed (UNAVAILABLE)
  6  the deadline passed (DEADLINE_EXCEEDED)
  7  the server refused the caller's credentials (UNAUTHENTICATED, PERMISSION_DENIED)
  8  the model does not support this (FAILED_PRECONDITION, UNIMPLEMENTED)
)";
}

}  // namespace attnserve::client
