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

// Listens on `address` ("0.0.0.0:9090") and serves `collectables` at /metrics.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    const std::string& address,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables);

}  // namespace attnserve::server
