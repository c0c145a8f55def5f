#include "server/completion_estimate.h"

#include <algorithm>

namespace attnserve::server {

void CompletionEstimate::IterationStarted(absl::Time now, int64_t tokens) {
  running_tokens_.store(tokens, std::memory_order_relaxed);
  running_since_ns_.store(absl::ToUnixNanos(now), std::memory_order_relaxed);
}

void CompletionEstimate::IterationEnded(absl::Time now) {
  const int64_t since = running_since_ns_.exchange(0, std::memory_order_relaxed);
  const int64_t tokens = running_tokens_.load(std::memory_order_relaxed);
  if (since == 0 || tokens <= 0) return;
  const double sample =
      absl::ToDoubleSeconds(now - absl::FromUnixNanos(since)) / static_cast<double>(tokens);
  const double old = average_.load(std::memory_order_relaxed);
  const double average = old == 0.0 ? sample : 0.75 * old + 0.25 * sample;
  average_.store(average, std::memory_order_relaxed);
  seconds_per_token_.store(std::max(average, sample), std::memory_order_relaxed);
}

absl::Time CompletionEstimate::Completion(absl::Time now, int64_t ahead, int64_t ahead_tokens,
                                          int64_t tokens, int64_t max_batch_size) const {
  const int64_t since = running_since_ns_.load(std::memory_order_relaxed);
  if (seconds_per_token_.load(std::memory_order_relaxed) == 0.0 || (since == 0 && ahead == 0)) {
    return absl::InfinitePast();
  }
  absl::Duration rest = absl::ZeroDuration();
  if (since != 0) {
    const absl::Time end =
        absl::FromUnixNanos(since) + Alone(running_tokens_.load(std::memory_order_relaxed));
    rest = std::max(absl::ZeroDuration(), end - now);
  }
  const int64_t beside =
      std::max<int64_t>(max_batch_size, 1) - 1 - ahead % std::max<int64_t>(max_batch_size, 1);
  return now + rest + Alone(ahead_tokens + tokens * (1 + beside));
}

absl::Duration CompletionEstimate::Alone(int64_t tokens) const {
  return absl::Seconds(seconds_per_token_.load(std::memory_order_relaxed) *
                       static_cast<double>(tokens));
}

}  // namespace attnserve::server
