// The server's metric set (../shared/DESIGN.md, serving conventions): Prometheus names in base
// units with a `model` label, histograms rather than summaries.
#pragma once

#include "server/metrics/registry.h"

namespace attnserve::server {

struct ServerMetrics {
  explicit ServerMetrics(metrics::Registry& registry);

  metrics::Family<metrics::Counter>& requests;        // {model, method, code}
  metrics::Family<metrics::Histogram>& latency;       // {model, method}
  metrics::Family<metrics::Histogram>& queue_time;    // {model, method}
  metrics::Family<metrics::Histogram>& batch_size;    // {model, method}
  metrics::Family<metrics::Counter>& tokens;          // {model, kind=prompt|generated}
  metrics::Family<metrics::Gauge>& in_flight;         // {model}
  metrics::Family<metrics::Histogram>& first_token;   // {model}
  metrics::Family<metrics::Gauge>& active_sequences;  // {model}: decoding right now
  metrics::Family<metrics::Gauge>& queue_length;      // {model}: waiting for the engine
  metrics::Family<metrics::Gauge>& queue_capacity;    // {model}: --max_queue_size
  // The resource model (docs/serving.md).
  metrics::Family<metrics::Gauge>& max_batch_tokens;        // {model}: tokens per engine call
  metrics::Family<metrics::Gauge>& kv_blocks;               // {model, state=used|cached|free}
  metrics::Family<metrics::Gauge>& kv_touched_bytes;        // {model}
  metrics::Family<metrics::Counter>& prefix_reused_tokens;  // {model}
  metrics::Family<metrics::Counter>& preemptions;           // {model}
  metrics::Family<metrics::Histogram>& step_tokens;         // {model}: tokens per engine call
  metrics::Family<metrics::Counter>& refused;               // {model, budget}
  metrics::Family<metrics::Gauge>& paused_streams;          // {model}: clients not reading
};

// process_cpu_seconds_total and process_resident_memory_bytes, refreshed at every scrape.
void AddProcessMetrics(metrics::Registry& registry);

}  // namespace attnserve::server
