// Flags from the environment, for containers: ATTNSERVE_THREADS=2 sets --threads=2. The command
// line, parsed afterwards, overrides them.
#pragma once

#include "absl/status/status.h"

namespace attnserve::server {

// Sets every flag whose ATTNSERVE_<NAME> variable (the flag's name upper-cased) is set.
// INVALID_ARGUMENT names the variable whose value the flag refuses.
absl::Status ApplyEnvironmentFlags();

}  // namespace attnserve::server
