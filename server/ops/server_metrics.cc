#include "server/ops/server_metrics.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "server/ops/memory_trimmer.h"

namespace attnserve::server {
namespace {

// Bucket bounds a, a·f, a·f², ... (count of them).
prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int count) {
  prometheus::Histogram::BucketBoundaries bounds;
  for (int i = 0; i < count; ++i, start *= factor) bounds.push_back(start);
  return bounds;
}

prometheus::Family<prometheus::Counter>& Counter(prometheus::Registry& registry,
                                                 const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Gauge>& Gauge(prometheus::Registry& registry,
                                             const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

HistogramFamily Histogram(prometheus::Registry& registry, const std::string& name,
                          const std::string& help, prometheus::Histogram::BucketBoundaries bounds) {
  return HistogramFamily(prometheus::BuildHistogram().Name(name).Help(help).Register(registry),
                         std::move(bounds));
}

prometheus::MetricFamily OneValue(const std::string& name, const std::string& help,
                                  prometheus::MetricType type, double value) {
  prometheus::ClientMetric metric;
  (type == prometheus::MetricType::Counter ? metric.counter.value : metric.gauge.value) = value;
  return prometheus::MetricFamily{name, help, type, {metric}};
}

}  // namespace

ServerMetrics::ServerMetrics(prometheus::Registry& registry)
    : requests(Counter(registry, "attnserve_requests_total",
                       "RPCs answered, by model, method and status code.")),
      latency(Histogram(registry, "attnserve_request_duration_seconds",
                        "Time from receiving an RPC to its last response.",
                        ExponentialBuckets(0.0005, 2.0, 18))),
      queue_time(Histogram(registry, "attnserve_queue_duration_seconds",
                           "Time a request waited before the engine started it.",
                           ExponentialBuckets(0.0001, 2.0, 18))),
      batch_size(Histogram(registry, "attnserve_batch_size", "Sequences per engine call.",
                           ExponentialBuckets(1.0, 2.0, 10))),
      tokens(Counter(registry, "attnserve_tokens_total",
                     "Tokens processed: prompt (read) or generated.")),
      in_flight(
          Gauge(registry, "attnserve_in_flight_requests", "RPCs received and not yet answered.")),
      first_token(Histogram(registry, "attnserve_time_to_first_token_seconds",
                            "Time from a Generate request to its first token.",
                            ExponentialBuckets(0.001, 2.0, 16))),
      active_sequences(
          Gauge(registry, "attnserve_active_sequences", "Sequences in the running decode batch.")),
      queue_length(Gauge(registry, "attnserve_queue_length",
                         "Requests queued for the engine, not yet started.")),
      queue_capacity(Gauge(registry, "attnserve_queue_capacity",
                           "Most requests the queue holds before UNAVAILABLE.")),
      max_batch_tokens(Gauge(registry, "attnserve_max_batch_tokens",
                             "Most tokens one engine call (and one request) takes.")),
      kv_blocks(Gauge(
          registry, "attnserve_kv_cache_blocks",
          "Blocks of the paged KV cache: used, cached (a published prefix nobody holds) or free.")),
      kv_touched_bytes(Gauge(registry, "attnserve_kv_cache_touched_bytes",
                             "Bytes of the KV cache's pool ever written: its resident part.")),
      prefix_reused_tokens(
          Counter(registry, "attnserve_prefix_reused_tokens_total",
                  "Prompt tokens whose keys and values were reused from cached blocks.")),
      preemptions(
          Counter(registry, "attnserve_preemptions_total",
                  "Generations whose KV blocks were freed for others, to be recomputed later.")),
      step_tokens(Histogram(registry, "attnserve_step_tokens", "Tokens per engine call.",
                            ExponentialBuckets(1.0, 2.0, 16))),
      refused(Counter(registry, "attnserve_requests_refused_total",
                      "Requests refused before running, by the budget they exceeded.")),
      paused_streams(Gauge(registry, "attnserve_paused_streams",
                           "Generate streams paused because their clients are not reading.")),
      constraint_mask(Histogram(registry, "attnserve_constraint_mask_seconds",
                                "Time to compute which tokens a constrained answer may take next.",
                                ExponentialBuckets(0.00001, 2.0, 16))) {}

void ServerMetrics::StartSeries(const std::string& model, const std::vector<std::string>& methods) {
  in_flight.Add({{"model", model}});
  tokens.Add({{"model", model}, {"kind", "prompt"}});
  for (const std::string& method : methods) {
    requests.Add({{"model", model}, {"method", method}, {"code", "OK"}});
    latency.Add({{"model", model}, {"method", method}});
    queue_time.Add({{"model", model}, {"method", method}});
    batch_size.Add({{"model", model}, {"method", method}});
    if (method == "Generate") {
      tokens.Add({{"model", model}, {"kind", "generated"}});
      first_token.Add({{"model", model}});
    }
  }
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  std::ifstream stat("/proc/self/stat");
  std::string field;
  // Fields 14 and 15 (utime, stime) in clock ticks; the command name has no spaces here.
  double ticks = 0;
  for (int i = 1; i <= 15 && stat >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);
  }
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return {
      OneValue("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
               prometheus::MetricType::Counter, ticks / static_cast<double>(sysconf(_SC_CLK_TCK))),
      OneValue("process_resident_memory_bytes", "Resident memory size in bytes.",
               prometheus::MetricType::Gauge,
               static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE))),
      OneValue("attnserve_allocator_free_bytes",
               "Bytes the allocator holds free, given back to the system once the engine is idle.",
               prometheus::MetricType::Gauge, static_cast<double>(MemoryTrimmer::FreeBytesHeld()))};
}

std::map<std::string, double> SumByLabel(const prometheus::Collectable& family,
                                         const std::string& label) {
  std::map<std::string, double> sums;
  for (const prometheus::MetricFamily& collected : family.Collect()) {
    for (const prometheus::ClientMetric& metric : collected.metric) {
      std::string key;
      for (const auto& pair : metric.label) {
        if (pair.name == label) key = pair.value;
      }
      sums[key] += collected.type == prometheus::MetricType::Counter ? metric.counter.value
                                                                     : metric.gauge.value;
    }
  }
  return sums;
}

}  // namespace attnserve::server
