#include "server/core/prefill_pacing.h"

#include <algorithm>
#include <cmath>

namespace attnserve::server {
namespace {

constexpr double kWeight = 0.25;  // of the newest step in the averages

double Blend(double average, double sample) {
  return average == 0 ? sample : (1 - kWeight) * average + kWeight * sample;
}

}  // namespace

PrefillPacing::PrefillPacing(double ratio, int64_t min_tokens, int64_t max_tokens)
    : ratio_(ratio),
      min_tokens_(std::clamp<int64_t>(min_tokens, 1, max_tokens)),
      max_tokens_(max_tokens) {}

void PrefillPacing::Observe(absl::Duration decode, absl::Duration other, int64_t other_tokens) {
  if (decode > absl::ZeroDuration()) {
    decode_seconds_ = Blend(decode_seconds_, absl::ToDoubleSeconds(decode));
  }
  if (other_tokens > 0 && other > absl::ZeroDuration()) {
    other_seconds_ = Blend(other_seconds_, absl::ToDoubleSeconds(other));
    other_tokens_ = Blend(other_tokens_, static_cast<double>(other_tokens));
  }
}

int64_t PrefillPacing::tokens() const {
  if (ratio_ <= 0 || decode_seconds_ == 0 || other_seconds_ == 0) return max_tokens_;
  const double per_token = other_seconds_ / other_tokens_;
  const double fit = std::round(ratio_ * decode_seconds_ / per_token);
  return static_cast<int64_t>(
      std::clamp(fit, static_cast<double>(min_tokens_), static_cast<double>(max_tokens_)));
}

}  // namespace attnserve::server
