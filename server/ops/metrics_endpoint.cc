#include "server/ops/metrics_endpoint.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace attnserve::server {

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    const std::string& address,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {  // civetweb reports a port it cannot bind by throwing
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", std::to_string(kMetricsThreads),
        "request_timeout_ms", std::to_string(kMetricsRequestTimeoutMs), "enable_keep_alive", "no"});
  } catch (const std::exception& error) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", address, ": ", error.what()));
  }
  for (const auto& collectable : collectables) exposer->RegisterCollectable(collectable);
  return exposer;
}

}  // namespace attnserve::server
