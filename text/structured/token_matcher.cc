#include "text/structured/token_matcher.h"

#include "absl/strings/str_cat.h"
#include "llguidance.h"

namespace attnserve::structured {

TokenMatcher::TokenMatcher(LlgMatcher* matcher) : matcher_(matcher) {}

TokenMatcher::~TokenMatcher() { llg_free_matcher(matcher_); }

absl::StatusOr<const uint32_t*> TokenMatcher::AllowedTokens() {
  if (llg_matcher_compute_mask(matcher_) != 0) return Error("computing the allowed tokens");
  const uint32_t* mask = llg_matcher_get_mask(matcher_);
  if (mask == nullptr) return Error("computing the allowed tokens");
  return mask;
}

absl::Status TokenMatcher::Consume(int64_t token) {
  if (token < 0 || token > UINT32_MAX ||
      llg_matcher_consume_token(matcher_, static_cast<uint32_t>(token)) != 0) {
    return Error(absl::StrCat("taking token ", token));
  }
  return absl::OkStatus();
}

bool TokenMatcher::Complete() const { return llg_matcher_is_stopped(matcher_); }

absl::Status TokenMatcher::Error(absl::string_view doing) const {
  const char* message = llg_matcher_get_error(matcher_);
  // A step that would exceed llguidance's limits on work per token is what fails here.
  return absl::ResourceExhaustedError(absl::StrCat("the answer's constraint failed ", doing, ": ",
                                                   message ? message : "unknown error"));
}

}  // namespace attnserve::structured
