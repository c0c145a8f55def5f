// One answer's progress through its constraint (llguidance's matcher): which tokens may come
// next, and whether the constraint is complete. One thread at a time (the engine's).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct LlgMatcher;

namespace attnserve::structured {

class TokenMatcher {
 public:
  // Takes ownership of a matcher llguidance built without error.
  explicit TokenMatcher(LlgMatcher* matcher);
  ~TokenMatcher();
  TokenMatcher(const TokenMatcher&) = delete;
  TokenMatcher& operator=(const TokenMatcher&) = delete;

  // The tokens allowed next: bit t % 32 of word t / 32 (as many words as the vocabulary needs),
  // valid until the next call. An error (a step past llguidance's resource limits) is final.
  absl::StatusOr<const uint32_t*> AllowedTokens();
  // The answer goes on with `token`, which AllowedTokens allowed.
  absl::Status Consume(int64_t token);
  // Nothing but end-of-text may follow: the constraint is complete.
  bool Complete() const;

 private:
  absl::Status Error(absl::string_view doing) const;

  LlgMatcher* const matcher_;
};

}  // namespace attnserve::structured
