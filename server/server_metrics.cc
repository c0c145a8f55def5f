#include "server/server_metrics.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace attnserve::server {

using metrics::ExponentialBuckets;

ServerMetrics::ServerMetrics(metrics::Registry& registry)
    : requests(registry.AddCounter("attnserve_requests_total",
                                   "RPCs answered, by model, method and status code.")),
      latency(registry.AddHistogram("attnserve_request_duration_seconds",
                                    "Time from receiving an RPC to its last response.",
                                    ExponentialBuckets(0.0005, 2.0, 18))),
      queue_time(registry.AddHistogram("attnserve_queue_duration_seconds",
                                       "Time a request waited before the engine started it.",
                                       ExponentialBuckets(0.0001, 2.0, 18))),
      batch_size(registry.AddHistogram("attnserve_batch_size", "Sequences per engine call.",
                                       ExponentialBuckets(1.0, 2.0, 10))),
      tokens(registry.AddCounter("attnserve_tokens_total",
                                 "Tokens processed: prompt (read) or generated.")),
      in_flight(
          registry.AddGauge("attnserve_in_flight_requests", "RPCs received and not yet answered.")),
      first_token(registry.AddHistogram("attnserve_time_to_first_token_seconds",
                                        "Time from a Generate request to its first token.",
                                        ExponentialBuckets(0.001, 2.0, 16))),
      active_sequences(registry.AddGauge("attnserve_active_sequences",
                                         "Sequences in the running decode batch.")),
      queue_length(registry.AddGauge("attnserve_queue_length",
                                     "Requests queued for the engine, not yet started.")),
      queue_capacity(registry.AddGauge("attnserve_queue_capacity",
                                       "Most requests the queue holds before UNAVAILABLE.")),
      max_batch_tokens(registry.AddGauge("attnserve_max_batch_tokens",
                                         "Most tokens one engine call (and one request) takes.")),
      kv_blocks(registry.AddGauge(
          "attnserve_kv_cache_blocks",
          "Blocks of the paged KV cache: used, cached (a published prefix nobody holds) or free.")),
      kv_touched_bytes(
          registry.AddGauge("attnserve_kv_cache_touched_bytes",
                            "Bytes of the KV cache's pool ever written: its resident part.")),
      prefix_reused_tokens(registry.AddCounter(
          "attnserve_prefix_reused_tokens_total",
          "Prompt tokens whose keys and values were reused from cached blocks.")),
      preemptions(registry.AddCounter(
          "attnserve_preemptions_total",
          "Generations whose KV blocks were freed for others, to be recomputed later.")),
      step_tokens(registry.AddHistogram("attnserve_step_tokens", "Tokens per engine call.",
                                        ExponentialBuckets(1.0, 2.0, 16))),
      refused(registry.AddCounter("attnserve_requests_refused_total",
                                  "Requests refused before running, by the budget they exceeded.")),
      paused_streams(
          registry.AddGauge("attnserve_paused_streams",
                            "Generate streams paused because their clients are not reading.")) {}

void AddProcessMetrics(metrics::Registry& registry) {
  auto& cpu = registry
                  .AddCounter("process_cpu_seconds_total",
                              "Total user and system CPU time spent in seconds.")
                  .Add({});
  auto& memory =
      registry.AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.").Add({});
  registry.OnCollect([&cpu, &memory] {
    std::ifstream stat("/proc/self/stat");
    std::string field;
    // Fields 14 and 15 (utime, stime) in clock ticks; the command name has no spaces here.
    double ticks = 0;
    for (int i = 1; i <= 15 && stat >> field; ++i) {
      if (i >= 14) ticks += std::stod(field);
    }
    const double seconds = ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
    cpu.Increment(seconds - cpu.Value());
    std::ifstream statm("/proc/self/statm");
    long pages_total = 0, pages_resident = 0;
    statm >> pages_total >> pages_resident;
    memory.Set(static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)));
  });
}

}  // namespace attnserve::server
