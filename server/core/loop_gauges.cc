#include "server/core/loop_gauges.h"

namespace attnserve::server {

LoopGauges::LoopGauges(const std::string& name, ServerMetrics& metrics)
    : queue_length_(metrics.queue_length.Add({{"model", name}})),
      active_sequences_(metrics.active_sequences.Add({{"model", name}})),
      paused_streams_(metrics.paused_streams.Add({{"model", name}})),
      kv_used_(metrics.kv_blocks.Add({{"model", name}, {"state", "used"}})),
      kv_cached_(metrics.kv_blocks.Add({{"model", name}, {"state", "cached"}})),
      kv_free_(metrics.kv_blocks.Add({{"model", name}, {"state", "free"}})),
      kv_touched_(metrics.kv_touched_bytes.Add({{"model", name}})),
      reused_tokens_(metrics.prefix_reused_tokens.Add({{"model", name}})),
      preemptions_(metrics.preemptions.Add({{"model", name}})) {}

void LoopGauges::Update(const Scheduler& scheduler, const StepPlan& plan) {
  reused_tokens_.Increment(static_cast<double>(plan.reused_tokens));
  preemptions_.Increment(static_cast<double>(plan.preemptions));
  paused_streams_.Set(static_cast<double>(scheduler.paused()));
  queue_length_.Set(static_cast<double>(scheduler.waiting()));
  active_sequences_.Set(static_cast<double>(scheduler.running()));
  const KvBlockPool* pool = scheduler.cache().pool();
  if (pool == nullptr) return;
  kv_used_.Set(static_cast<double>(pool->used_blocks()));
  kv_cached_.Set(static_cast<double>(pool->cached_blocks()));
  kv_free_.Set(static_cast<double>(pool->free_blocks() - pool->cached_blocks()));
  kv_touched_.Set(static_cast<double>(pool->touched_blocks() * pool->shape().BlockBytes()));
}

}  // namespace attnserve::server
