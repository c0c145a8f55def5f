#include "server/metrics/http_exposer.h"

#include <civetweb.h>

#include "absl/strings/str_cat.h"

namespace attnserve::metrics {
namespace {

int HandleMetrics(mg_connection* connection, void* registry) {
  const std::string body = static_cast<const Registry*>(registry)->Serialize();
  mg_printf(connection,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  mg_write(connection, body.data(), body.size());
  return 200;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpExposer>> HttpExposer::Start(const std::string& address,
                                                                const Registry& registry) {
  mg_init_library(0);
  const char* options[] = {"listening_ports", address.c_str(), "num_threads", "2", nullptr};
  mg_callbacks callbacks{};
  mg_context* context = mg_start(&callbacks, nullptr, options);
  if (context == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", address));
  }
  mg_set_request_handler(context, "/metrics", HandleMetrics, const_cast<Registry*>(&registry));
  return std::unique_ptr<HttpExposer>(new HttpExposer(context));
}

HttpExposer::~HttpExposer() { mg_stop(context_); }

}  // namespace attnserve::metrics
