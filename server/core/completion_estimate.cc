#include "server/core/completion_estimate.h"

#include <algorithm>

namespace attnserve::server {

void CompletionEstimate::IterationStarted(absl::Time now, int64_t tokens) {
  running_tokens_.store(tokens, std::memory_order_relaxed);
  running_since_ns_.store(absl::ToUnixNanos(now), std::memory_order_relaxed);
}

void CompletionEstimate::IterationEnded(absl::Time now, int64_t tokens) {
  const int64_t since = running_since_ns_.exchange(0, std::memory_order_relaxed);
  if (since == 0 || tokens <= 0) return;
  const double sample =
      absl::ToDoubleSeconds(now - absl::FromUnixNanos(since)) / static_cast<double>(tokens);
  const double old = average_.load(std::memory_order_relaxed);
  const double average = old == 0.0 ? sample : 0.75 * old + 0.25 * sample;
  average_.store(average, std::memory_order_relaxed);
  seconds_per_token_.store(std::max(average, sample), std::memory_order_relaxed);
}

absl::Time CompletionEstimate::Completion(absl::Time now, int64_t ahead, int64_t ahead_tokens,
                                          int64_t tokens, int64_t per_step) const {
  const int64_t since = running_since_ns_.load(std::memory_order_relaxed);
  double per_token = seconds_per_token_.load(std::memory_order_relaxed);
  if (per_token == 0.0 || (since == 0 && ahead == 0)) return absl::InfinitePast();
  absl::Duration rest = absl::ZeroDuration();
  if (since != 0) {
    // A running iteration that has already taken longer than estimated (the machine got
    // slower) raises the cost per token at once, for the work ahead too.
    const auto running = static_cast<double>(running_tokens_.load(std::memory_order_relaxed));
    const double elapsed = absl::ToDoubleSeconds(now - absl::FromUnixNanos(since));
    per_token = std::max(per_token, elapsed / running);
    rest = std::max(absl::ZeroDuration(), absl::Seconds(per_token * running - elapsed));
  }
  const int64_t batch = std::max<int64_t>(per_step, 1);
  const int64_t beside = batch - 1 - ahead % batch;
  return now + rest +
         absl::Seconds(per_token * static_cast<double>(ahead_tokens + tokens * (1 + beside)));
}

absl::Duration CompletionEstimate::Alone(int64_t tokens) const {
  return absl::Seconds(seconds_per_token_.load(std::memory_order_relaxed) *
                       static_cast<double>(tokens));
}

}  // namespace attnserve::server
