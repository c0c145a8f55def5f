// Counts a call in flight while it lives, then records its latency and status code, whichever
// protocol carried it.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "server/ops/server_metrics.h"

namespace attnserve::server {

class CallScope {
 public:
  // `model` is the label: a served model's name, never a caller's arbitrary string (which would
  // let any client create unbounded metric series).
  CallScope(ServerMetrics& metrics, std::string model, std::string method);
  // Call once, when the call's answer is known.
  void Finish(const absl::Status& status);

 private:
  ServerMetrics& metrics_;
  const std::string model_, method_;
  prometheus::Gauge& in_flight_;
  const absl::Time start_ = absl::Now();
};

}  // namespace attnserve::server
