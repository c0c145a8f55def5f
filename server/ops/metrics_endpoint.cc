#include "server/ops/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attnserve::server {
namespace {

// Opens and closes a TCP connection to host:port (numeric IPv4 or IPv6); failures are ignored.
void Knock(const std::string& host, int port) {
  sockaddr_storage address{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in6);
  } else {
    return;
  }
  const int socket_fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (socket_fd < 0) return;
  connect(socket_fd, reinterpret_cast<sockaddr*>(&address), length);
  close(socket_fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& host, int port,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  const std::string address = absl::StrCat(host, ":", port);
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
  // A wildcard address is reached through loopback.
  std::string wake_host = host;
  if (host.empty() || host == "0.0.0.0") wake_host = "127.0.0.1";
  if (host == "::" || host == "[::]") wake_host = "::1";
  if (wake_host.size() > 2 && wake_host.front() == '[') {
    wake_host = wake_host.substr(1, wake_host.size() - 2);
  }
  return std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(std::move(wake_host), std::move(exposer)));
}

MetricsEndpoint::~MetricsEndpoint() {
  const std::vector<int> ports = exposer_->GetListeningPorts();
  std::atomic<bool> stopped = false;
  std::thread stopper([&] {
    exposer_.reset();
    stopped = true;
  });
  // A knock before civetweb has set its stop flag is served as a connection and the poll begins
  // again, so knocks go on until the stop is done (and are refused once the socket closes).
  while (!stopped) {
    for (int port : ports) Knock(wake_host_, port);
    absl::SleepFor(absl::Milliseconds(20));
  }
  stopper.join();
}

}  // namespace attnserve::server
