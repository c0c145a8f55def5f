// GET /metrics over HTTP for Prometheus to scrape: prometheus-cpp's exposer (civetweb underneath),
// configured so that idle or slow clients cannot hold a scrape up. Each connection gets a worker
// thread only while it sends a request, and a request must arrive whole within
// kRequestTimeoutMs: an idle connection or a slowloris is dropped then, and with kThreads workers
// a scrape waits for at most one timeout even when that many hostile connections are open.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::server {

constexpr int kMetricsThreads = 8;
constexpr int kMetricsRequestTimeoutMs = 2000;

class MetricsEndpoint {
 public:
  // Listens on host:port ("0.0.0.0", 9090) and serves `collectables` at /metrics.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& host, int port,
      const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables);

  // Stops at once. civetweb's listening thread looks at its stop flag only between polls of its
  // sockets, which wait up to 2 s: a drained server took that long to exit. Connections to the
  // port, until the stop is done, wake it.
  ~MetricsEndpoint();

 private:
  MetricsEndpoint(std::string wake_host, std::unique_ptr<prometheus::Exposer> exposer)
      : wake_host_(std::move(wake_host)), exposer_(std::move(exposer)) {}

  std::string wake_host_;  // where a connection reaches the listening socket
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace attnserve::server
