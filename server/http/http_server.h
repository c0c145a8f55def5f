// An HTTP/1.1 server for the server's HTTP APIs (the OpenAI-compatible one): Boost.Beast over
// Asio, asynchronous, on a few threads of its own. No thread waits for the engine: a request is
// handed to the handler with a responder, which any thread completes later, whole or as a stream
// of chunks (server-sent events). Every request's cost is bounded before it is read: its header
// and body sizes, the time it may take to arrive (a client sending a byte at a time is cut off),
// the connections open at once. A client that goes away while its answer is being made is told
// to the handler, so its work is cancelled; one that stops reading backs its stream's chunks up
// here (a small socket send buffer), where the handler sees them as unsent, and is cut off
// after write_timeout. Plain HTTP, or HTTPS (OpenSSL through Asio). docs/serving.md says why
// Beast.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace attnserve::server {

struct HttpLimits {
  int64_t max_header_bytes = 16 << 10;
  int64_t max_body_bytes = 16 << 20;
  // A request's header and body must arrive within this, and an idle keep-alive connection is
  // closed after it.
  absl::Duration read_timeout = absl::Seconds(30);
  // An answer's bytes not taken by the client for this long: the client is gone, its
  // connection closed and its work cancelled.
  absl::Duration write_timeout = absl::Seconds(60);
  // Connections open at once; more are answered 503 and closed.
  int64_t max_connections = 1024;
  int threads = 1;
};

// Serving HTTPS: PEM texts of the certificate chain and its key, and of the CAs whose client
// certificates are required (mutual TLS; empty: none asked for).
struct HttpTls {
  std::string certificate_chain, private_key, client_ca;
};

struct HttpRequest {
  std::string method;  // "GET", "POST"
  std::string target;  // the path, without the query
  std::string content_type;
  std::string body;
  std::string client;  // the peer, "ipv4:127.0.0.1:5555" as gRPC names it
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case

  // The header's value, or empty.
  std::string Header(std::string_view name) const;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Answers one request, from any thread, once: Respond, or StartStream, Chunks and EndStream.
// Calls after the client has gone are dropped.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  // `headers`: more of them (name, value), beside Content-Type and Content-Length.
  virtual void Respond(int status, std::string content_type, std::string body,
                       HttpHeaders headers) = 0;
  void Respond(int status, std::string content_type, std::string body) {
    Respond(status, std::move(content_type), std::move(body), {});
  }
  virtual void StartStream(int status, std::string content_type) = 0;
  virtual void Chunk(std::string data) = 0;
  virtual void EndStream() = 0;
  // Chunks handed over and not yet written to the client: a client that does not read lets
  // them pile up.
  virtual int64_t Unsent() const = 0;
  // Called once, on the server's thread, if the client goes away before the answer has been
  // sent; also when it later reads again after being written to (OnWritten).
  virtual void OnGone(std::function<void()> gone) = 0;
  // Called on the server's thread whenever a chunk has been written: a paused stream may go on.
  virtual void OnWritten(std::function<void()> written) = 0;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual void Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) = 0;
};

class HttpServer {
 public:
  // Listens on host:port (0: a free port) and serves until Shutdown; HTTPS with `tls`.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& host, int port, const HttpLimits& limits, HttpHandler& handler,
      const std::optional<HttpTls>& tls = std::nullopt);
  virtual ~HttpServer() = default;
  virtual int port() const = 0;
  // Stops accepting, closes idle connections, lets answers in progress finish until
  // `deadline`, then closes the rest and joins its threads.
  virtual void Shutdown(absl::Time deadline) = 0;
};

}  // namespace attnserve::server
