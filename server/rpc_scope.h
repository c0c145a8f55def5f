// Counts an RPC in flight while it lives, then records its latency and status code.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "server/server_metrics.h"

namespace attnserve::server {

grpc::Status ToGrpc(const absl::Status& status);

class RpcScope {
 public:
  // `model` is the label: a served model's name, never a caller's arbitrary string (which would
  // let any client create unbounded metric series).
  RpcScope(ServerMetrics& metrics, std::string model, std::string method);
  // Call once, when the RPC's answer is known.
  grpc::Status Finish(const absl::Status& status);

 private:
  ServerMetrics& metrics_;
  const std::string model_, method_;
  prometheus::Gauge& in_flight_;
  const absl::Time start_ = absl::Now();
};

}  // namespace attnserve::server
