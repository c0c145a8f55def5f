// The server's metric set (docs/design.md, serving conventions): Prometheus names in base
// units with a `model` label, histograms rather than summaries, on prometheus-cpp.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <string>
#include <vector>

namespace attnserve::server {

// A histogram family with its bucket bounds, so that a series is added by its labels alone.
class HistogramFamily {
 public:
  HistogramFamily(prometheus::Family<prometheus::Histogram>& family,
                  prometheus::Histogram::BucketBoundaries bounds)
      : family_(family), bounds_(std::move(bounds)) {}
  prometheus::Histogram& Add(const prometheus::Labels& labels) {
    return family_.Add(labels, bounds_);
  }

 private:
  prometheus::Family<prometheus::Histogram>& family_;
  const prometheus::Histogram::BucketBoundaries bounds_;
};

struct ServerMetrics {
  explicit ServerMetrics(prometheus::Registry& registry);

  // The series a model's calls answered OK will fill, at zero: they are scraped from the start,
  // so that rates and alerts need no first request.
  void StartSeries(const std::string& model, const std::vector<std::string>& methods);

  prometheus::Family<prometheus::Counter>& requests;        // {model, method, code}
  HistogramFamily latency;                                  // {model, method}
  HistogramFamily queue_time;                               // {model, method}
  HistogramFamily batch_size;                               // {model, method}
  prometheus::Family<prometheus::Counter>& tokens;          // {model, kind=prompt|generated}
  prometheus::Family<prometheus::Gauge>& in_flight;         // {model}
  HistogramFamily first_token;                              // {model}
  prometheus::Family<prometheus::Gauge>& active_sequences;  // {model}: decoding right now
  prometheus::Family<prometheus::Gauge>& queue_length;      // {model}: waiting for the engine
  prometheus::Family<prometheus::Gauge>& queue_capacity;    // {model}: --max_queue_size
  // The resource model (docs/serving.md).
  prometheus::Family<prometheus::Gauge>& max_batch_tokens;        // {model}: per engine call
  prometheus::Family<prometheus::Gauge>& kv_blocks;               // {model, state=used|cached|free}
  prometheus::Family<prometheus::Gauge>& kv_touched_bytes;        // {model}
  prometheus::Family<prometheus::Counter>& prefix_reused_tokens;  // {model}
  prometheus::Family<prometheus::Counter>& preemptions;           // {model}
  HistogramFamily step_tokens;                                    // {model}: per engine call
  prometheus::Family<prometheus::Counter>& refused;               // {model, budget}
  prometheus::Family<prometheus::Gauge>& paused_streams;          // {model}: clients not reading
  // Structured outputs: the time to compute one constrained token's mask
  // (docs/structured-outputs.md).
  HistogramFamily constraint_mask;  // {model}
};

// process_cpu_seconds_total, process_resident_memory_bytes and attnserve_allocator_free_bytes,
// read at every scrape.
class ProcessMetrics final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

// A counter or gauge family's values summed by the value of `label` (all series under "" when
// `label` is empty): for the exit summary and tests.
std::map<std::string, double> SumByLabel(const prometheus::Collectable& family,
                                         const std::string& label = "");

}  // namespace attnserve::server
