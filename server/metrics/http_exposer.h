// Serves a Registry at GET /metrics over HTTP (civetweb), for Prometheus to scrape.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/metrics/registry.h"

struct mg_context;

namespace attnserve::metrics {

class HttpExposer {
 public:
  // Listens on `address` ("0.0.0.0:9090", or a port alone).
  static absl::StatusOr<std::unique_ptr<HttpExposer>> Start(const std::string& address,
                                                            const Registry& registry);
  ~HttpExposer();

 private:
  HttpExposer(mg_context* context) : context_(context) {}
  mg_context* context_;
};

}  // namespace attnserve::metrics
