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
};

// process_cpu_seconds_total and process_resident_memory_bytes, refreshed at every scrape.
void AddProcessMetrics(metrics::Registry& registry);

}  // namespace attnserve::server
