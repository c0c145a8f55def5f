// The exit codes of attnserve's command-line tools, stable so that scripts can rely on them.
#pragma once

#include "absl/status/status.h"

namespace attnserve::client {

enum ExitCode {
  kExitOk = 0,
  kExitOther = 1,           // anything not below (INTERNAL, ...)
  kExitUsage = 2,           // unknown command or flag, bad value, unreadable TLS file
  kExitInvalidRequest = 3,  // INVALID_ARGUMENT, OUT_OF_RANGE: the server refused the content
  kExitNotFound = 4,        // NOT_FOUND: no such model
  kExitUnavailable = 5,     // UNAVAILABLE: unreachable, overloaded, draining; a TLS handshake
  kExitDeadline = 6,        // DEADLINE_EXCEEDED
  kExitAccess = 7,          // UNAUTHENTICATED, PERMISSION_DENIED: credentials refused
  kExitUnsupported = 8,     // FAILED_PRECONDITION, UNIMPLEMENTED: the model cannot do this
};

ExitCode ExitCodeFor(const absl::Status& status);

// The table above, for --help.
const char* ExitCodeHelp();

}  // namespace attnserve::client
