// When a request queued now would be answered, from the engine time per input token the model's
// scheduler measured. The worker refuses a request that the work ahead would make miss its
// deadline at once (UNAVAILABLE, retryable elsewhere) rather than letting it fail late.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace attnserve::server {

class CompletionEstimate {
 public:
  // Scheduler thread: an iteration begins with `tokens` input tokens of queued requests; it
  // ends, having put `tokens` prompt tokens through the engine (with the generations' prompt
  // chunks, which share its time; the caller leaves its decode call's time out).
  void IterationStarted(absl::Time now, int64_t tokens);
  void IterationEnded(absl::Time now, int64_t tokens);

  // Any thread. When a request of `tokens` input tokens would be answered, queued behind
  // `ahead` requests holding `ahead_tokens`: the running iteration's rest, the work ahead, then
  // its own step, counted as full with `per_step` requests its size (the requests that arrive
  // behind it until the step starts join it). InfinitePast before the first measurement and when
  // nothing runs or waits (an idle server runs whatever comes).
  absl::Time Completion(absl::Time now, int64_t ahead, int64_t ahead_tokens, int64_t tokens,
                        int64_t per_step) const;
  // How long the request would take with nothing ahead of it or beside it.
  absl::Duration Alone(int64_t tokens) const;

 private:
  // Engine seconds per input token: the average over iterations (a quarter weight each), or the
  // last iteration's when higher: slow to believe the engine got faster, quick to believe it got
  // slower (a burst of large batches, a noisy neighbour), which is what makes requests late.
  std::atomic<double> average_{0.0};
  std::atomic<double> seconds_per_token_{0.0};
  std::atomic<int64_t> running_since_ns_{0};  // 0: no iteration running
  std::atomic<int64_t> running_tokens_{0};
};

}  // namespace attnserve::server
