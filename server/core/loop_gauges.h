// A model's engine loop as its gauges show it: requests queued, generations active and paused,
// the KV cache's blocks by state and its written bytes, prefix tokens reused, preemptions.
#pragma once

#include <string>

#include "server/core/scheduler.h"
#include "server/ops/server_metrics.h"

namespace attnserve::server {

class LoopGauges {
 public:
  LoopGauges(const std::string& name, ServerMetrics& metrics);
  // The scheduler's state now, and what `plan` added (reused tokens, preemptions).
  void Update(const Scheduler& scheduler, const StepPlan& plan);
  void QueueLength(int64_t queued) { queue_length_.Set(static_cast<double>(queued)); }

 private:
  prometheus::Gauge& queue_length_;
  prometheus::Gauge& active_sequences_;  // generations counted from admission until they end
  prometheus::Gauge& paused_streams_;
  prometheus::Gauge& kv_used_;
  prometheus::Gauge& kv_cached_;
  prometheus::Gauge& kv_free_;
  prometheus::Gauge& kv_touched_;
  prometheus::Counter& reused_tokens_;
  prometheus::Counter& preemptions_;
};

}  // namespace attnserve::server
