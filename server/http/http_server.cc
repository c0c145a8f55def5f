#include "server/http/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attnserve::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

// A stream's kernel send buffer (Linux doubles it): a few dozen events' worth.
constexpr int kStreamSendBufferBytes = 16 << 10;

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return absl::ToChronoNanoseconds(d);
}

std::string PeerName(const tcp::socket& socket) {
  boost::system::error_code error;
  const tcp::endpoint peer = socket.remote_endpoint(error);
  if (error) return "ipv4:unknown";
  return absl::StrCat(peer.address().is_v6() ? "ipv6:[" : "ipv4:", peer.address().to_string(),
                      peer.address().is_v6() ? "]:" : ":", peer.port());
}

// The client closed the connection (its FIN or a reset arrived), whatever bytes it sent before
// that the server has not read: while an answer is made, the server keeps its own side open.
bool PeerClosed(tcp::socket& socket) {
  tcp_info info{};
  socklen_t size = sizeof(info);
  return getsockopt(socket.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &size) == 0 &&
         info.tcpi_state != TCP_ESTABLISHED;
}

class Listener;

// One connection: reads a request, hands it to the handler, writes its answer, and again while
// the client keeps the connection alive. Everything runs on the connection's strand; the
// responder posts to it from other threads.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `tls`: the connection is TLS, with that context.
  Session(tcp::socket socket, Listener& listener, ssl::context* tls);
  ~Session();
  void Run() { ReadHeader(); }
  // On the strand: closes the connection unless an answer is in progress (`force`: even then).
  void Close(bool force);

  // The responder's side, from any thread.
  void Post(std::function<void(Session&)> action) {
    asio::post(Tcp().get_executor(),
               [self = shared_from_this(), action = std::move(action)] { action(*self); });
  }
  void Respond(int status, std::string content_type, std::string body, HttpHeaders headers);
  void StartStream(int status, std::string content_type);
  void Chunk(std::string data);
  void EndStream();

  std::atomic<int64_t> unsent{0};
  std::function<void()> gone, written;

 private:
  // The TCP stream under TLS, if any.
  beast::tcp_stream& Tcp() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }
  // Runs `operation` on the stream the HTTP messages go over, plain or TLS.
  template <typename Operation>
  void WithStream(Operation operation) {
    if (tls_) {
      operation(*tls_);
    } else {
      operation(*plain_);
    }
  }
  void Handshake();
  void ReadHeader();
  void OnHeader(beast::error_code error);
  void ReadBody();
  void OnBody(beast::error_code error);
  void Dispatch();
  void WatchForGone();
  void WatchForClose(int64_t generation);
  void Refuse(http::status status, std::string message, bool keep_alive);
  enum class Part { kHeader, kChunk, kLast };  // kLast: the answer's last bytes
  void Write(std::string bytes, Part part);
  void WriteNext();
  void DropWrites();
  void Finished();
  void Linger();
  void Drain(std::shared_ptr<std::array<char, 16384>> buffer, int64_t left);
  void Gone();

  std::optional<beast::tcp_stream> plain_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
  std::optional<asio::steady_timer> close_watch_;  // see WatchForClose
  bool handshaken_ = false;
  Listener& listener_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = false;
  bool answering_ = false;  // a request is with the handler
  bool closed_ = false;
  bool streaming_ = false;
  int64_t request_generation_ = 0;
  std::deque<std::pair<std::string, Part>> writes_;  // front: being written
  bool writing_ = false;
  std::string peer_;
};

class Responder final : public HttpResponder {
 public:
  explicit Responder(std::shared_ptr<Session> session) : session_(std::move(session)) {}
  ~Responder() override {
    // A handler that drops its responder unanswered would leave the client waiting.
    if (!answered_.exchange(true)) {
      session_->Post([](Session& s) {
        s.Respond(500, "application/json",
                  R"({"error":{"message":"the request was not answered","type":"server_error",)"
                  R"("param":null,"code":500}})",
                  {});
      });
    }
  }
  using HttpResponder::Respond;
  void Respond(int status, std::string content_type, std::string body,
               HttpHeaders headers) override {
    if (answered_.exchange(true)) return;
    session_->Post([status, content_type = std::move(content_type), body = std::move(body),
                    headers = std::move(headers)](Session& s) mutable {
      s.Respond(status, std::move(content_type), std::move(body), std::move(headers));
    });
  }
  void StartStream(int status, std::string content_type) override {
    if (answered_.exchange(true)) return;
    session_->Post([status, content_type = std::move(content_type)](Session& s) mutable {
      s.StartStream(status, std::move(content_type));
    });
  }
  void Chunk(std::string data) override {
    session_->unsent.fetch_add(1, std::memory_order_relaxed);
    session_->Post([data = std::move(data)](Session& s) mutable { s.Chunk(std::move(data)); });
  }
  void EndStream() override {
    session_->Post([](Session& s) { s.EndStream(); });
  }
  int64_t Unsent() const override { return session_->unsent.load(std::memory_order_relaxed); }
  void OnGone(std::function<void()> gone) override { session_->gone = std::move(gone); }
  void OnWritten(std::function<void()> written) override { session_->written = std::move(written); }

 private:
  std::shared_ptr<Session> session_;
  std::atomic<bool> answered_{false};
};

class Listener final : public HttpServer {
 public:
  Listener(const HttpLimits& limits, HttpHandler& handler)
      : limits_(limits), handler_(handler), acceptor_(io_) {}
  ~Listener() override { Shutdown(absl::Now()); }

  // Serves HTTPS from now on: the certificate, its key and the client CAs, if any.
  absl::Status UseTls(const HttpTls& tls) {
    auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
    boost::system::error_code error;
    context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                             ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                             ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                         error);
    const auto failed = [&](const char* what) {
      return absl::InvalidArgumentError(
          absl::StrCat("HTTPS: cannot use the ", what, ": ", error.message()));
    };
    context->use_certificate_chain(asio::buffer(tls.certificate_chain), error);
    if (error) return failed("certificate chain (--tls_cert)");
    context->use_private_key(asio::buffer(tls.private_key), ssl::context::pem, error);
    if (error) return failed("private key (--tls_key)");
    if (!tls.client_ca.empty()) {
      context->add_certificate_authority(asio::buffer(tls.client_ca), error);
      if (error) return failed("client CAs (--tls_client_ca)");
      context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, error);
      if (error) return failed("client CAs (--tls_client_ca)");
    }
    tls_ = std::move(context);
    return absl::OkStatus();
  }

  absl::Status Listen(const std::string& host, int port) {
    boost::system::error_code error;
    const auto address = asio::ip::make_address(host, error);
    if (error) return absl::InvalidArgumentError(absl::StrCat("bad HTTP address ", host));
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
    acceptor_.open(endpoint.protocol(), error);
    if (!error) acceptor_.set_option(asio::socket_base::reuse_address(true), error);
    if (!error) acceptor_.bind(endpoint, error);
    if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
    if (error) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen for HTTP on ", host, ":", port, ": ", error.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    Accept();
    for (int i = 0; i < std::max(1, limits_.threads); ++i)
      threads_.emplace_back([this] { io_.run(); });
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  void Shutdown(absl::Time deadline) override {
    if (threads_.empty()) return;
    asio::post(io_, [this] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      ForEachSession([](Session& s) { s.Close(/*force=*/false); });
    });
    while (sessions_.load() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    ForEachSession([](Session& s) { s.Close(/*force=*/true); });
    while (sessions_.load() > 0 && absl::Now() < deadline + absl::Seconds(1)) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    io_.stop();
    for (auto& thread : threads_) thread.join();
    threads_.clear();
  }

  const HttpLimits& limits() const { return limits_; }
  HttpHandler& handler() { return handler_; }

  void Register(Session* session) {
    std::lock_guard lock(mutex_);
    live_.push_back(session);
  }
  void Unregister(Session* session) {
    std::lock_guard lock(mutex_);
    std::erase(live_, session);
    sessions_.fetch_sub(1);
  }

 private:
  void Accept() {
    acceptor_.async_accept(
        asio::make_strand(io_), [this](beast::error_code error, tcp::socket socket) {
          if (error == asio::error::operation_aborted || !acceptor_.is_open()) return;
          if (!error) {
            sessions_.fetch_add(1);
            auto session = std::make_shared<Session>(std::move(socket), *this, tls_.get());
            Register(session.get());
            session->Run();
          }
          Accept();
        });
  }

  void ForEachSession(void (*action)(Session&)) {
    std::vector<std::shared_ptr<Session>> sessions;
    {
      std::lock_guard lock(mutex_);
      for (Session* s : live_) {
        // A session being destroyed has no owner left; it unregisters itself.
        if (auto owned = s->weak_from_this().lock()) sessions.push_back(std::move(owned));
      }
    }
    for (auto& s : sessions) s->Post([action](Session& session) { action(session); });
  }

  const HttpLimits limits_;
  HttpHandler& handler_;
  // Before io_: sessions its pending handlers still hold unregister when it is destroyed.
  std::atomic<int64_t> sessions_{0};
  std::mutex mutex_;  // guards live_
  std::vector<Session*> live_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::unique_ptr<ssl::context> tls_;  // HTTPS, when set
  int port_ = 0;
  std::vector<std::thread> threads_;

 public:
  int64_t sessions() const { return sessions_.load(); }
};

Session::Session(tcp::socket socket, Listener& listener, ssl::context* tls) : listener_(listener) {
  if (tls != nullptr) {
    tls_.emplace(std::move(socket), *tls);
  } else {
    plain_.emplace(std::move(socket));
  }
  close_watch_.emplace(Tcp().get_executor());
  peer_ = PeerName(Tcp().socket());
}

Session::~Session() { listener_.Unregister(this); }

// A TLS connection's handshake, within the time a request has to arrive.
void Session::Handshake() {
  Tcp().expires_after(ToChrono(listener_.limits().read_timeout));
  tls_->async_handshake(ssl::stream_base::server,
                        [self = shared_from_this()](beast::error_code error) {
                          if (error) return self->Close(true);
                          self->handshaken_ = true;
                          self->ReadHeader();
                        });
}

void Session::ReadHeader() {
  if (closed_) return;
  if (tls_ && !handshaken_) return Handshake();
  if (listener_.sessions() > listener_.limits().max_connections) {
    return Refuse(http::status::service_unavailable, "the server has too many connections open",
                  false);
  }
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(listener_.limits().max_header_bytes));
  parser_->body_limit(static_cast<uint64_t>(listener_.limits().max_body_bytes));
  Tcp().expires_after(ToChrono(listener_.limits().read_timeout));
  WithStream([&](auto& stream) {
    http::async_read_header(
        stream, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code error, size_t) { self->OnHeader(error); });
  });
}

void Session::OnHeader(beast::error_code error) {
  if (error == http::error::header_limit) {
    return Refuse(http::status::request_header_fields_too_large,
                  absl::StrCat("the request's header is over ", listener_.limits().max_header_bytes,
                               " bytes"),
                  false);
  }
  if (error == http::error::body_limit) {
    return Refuse(
        http::status::payload_too_large,
        absl::StrCat("the request's body is over ", listener_.limits().max_body_bytes, " bytes"),
        false);
  }
  if (error) {
    // Timed out, closed or unparsable: a malformed request gets a 400 if the socket still
    // takes one.
    if (error != beast::error::timeout && error != http::error::end_of_stream &&
        error != asio::error::eof && error != asio::error::connection_reset &&
        error != asio::error::operation_aborted && !closed_) {
      return Refuse(http::status::bad_request,
                    absl::StrCat("malformed HTTP request: ", error.message()), false);
    }
    return Close(true);
  }
  const auto& header = parser_->get();
  if (header[http::field::expect] == "100-continue") {
    auto reply = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
    WithStream([&](auto& stream) {
      http::async_write(stream, *reply,
                        [self = shared_from_this(), reply](beast::error_code error, size_t) {
                          if (error) return self->Close(true);
                          self->ReadBody();
                        });
    });
    return;
  }
  ReadBody();
}

void Session::ReadBody() {
  WithStream([&](auto& stream) {
    http::async_read(
        stream, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code error, size_t) { self->OnBody(error); });
  });
}

void Session::OnBody(beast::error_code error) {
  if (error == http::error::body_limit) {
    return Refuse(
        http::status::payload_too_large,
        absl::StrCat("the request's body is over ", listener_.limits().max_body_bytes, " bytes"),
        false);
  }
  if (error) return OnHeader(error);
  Dispatch();
}

void Session::Dispatch() {
  http::request<http::string_body> message = parser_->release();
  parser_.reset();
  keep_alive_ = message.keep_alive();
  Tcp().expires_never();  // an answer may take as long as the work does
  HttpRequest request;
  request.method = std::string(message.method_string());
  const std::string target(message.target());
  request.target = target.substr(0, target.find('?'));
  request.content_type = std::string(message[http::field::content_type]);
  request.client = peer_;
  for (const auto& field : message) {
    request.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())),
                                 std::string(field.value()));
  }
  request.body = std::move(message.body());
  answering_ = true;
  ++request_generation_;
  gone = nullptr;
  written = nullptr;
  listener_.handler().Handle(std::move(request), std::make_shared<Responder>(shared_from_this()));
  if (answering_) WatchForGone();
}

// Waits for the socket to turn readable while the answer is made: a client that closed its end
// (EOF, a reset) is gone, and its work is cancelled. Bytes of a pipelined request end the watch.
void Session::WatchForGone() {
  Tcp().socket().async_wait(
      tcp::socket::wait_read,
      [self = shared_from_this(), generation = request_generation_](beast::error_code error) {
        if (generation != self->request_generation_ || !self->answering_) return;
        if (error == asio::error::operation_aborted) return;
        char byte;
        boost::system::error_code peek_error;
        const size_t peeked =
            error ? 0
                  : self->Tcp().socket().receive(asio::buffer(&byte, 1), tcp::socket::message_peek,
                                                 peek_error);
        if (error || peek_error || peeked == 0 || PeerClosed(self->Tcp().socket())) {
          return self->Gone();
        }
        // Bytes wait: a pipelined request, or on HTTPS perhaps the client's close alert. The
        // socket stays readable with them, so the close is looked for instead.
        self->WatchForClose(generation);
      });
}

// Looks every 100 ms, while the answer is made, for the client's close behind bytes it sent.
void Session::WatchForClose(int64_t generation) {
  close_watch_->expires_after(std::chrono::milliseconds(100));
  close_watch_->async_wait([self = shared_from_this(), generation](beast::error_code error) {
    if (error || generation != self->request_generation_ || !self->answering_) return;
    if (PeerClosed(self->Tcp().socket())) return self->Gone();
    self->WatchForClose(generation);
  });
}

void Session::Gone() {
  closed_ = true;
  answering_ = false;
  DropWrites();
  if (auto callback = std::exchange(gone, nullptr)) callback();
  written = nullptr;
  beast::error_code ignored;
  Tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
  Tcp().close();
}

void Session::Close(bool force) {
  if (closed_ || (answering_ && !force)) {
    keep_alive_ = false;  // closes once the answer is out
    return;
  }
  if (answering_) return Gone();
  closed_ = true;
  beast::error_code ignored;
  Tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
  Tcp().close();
}

void Session::Refuse(http::status status, std::string message, bool keep_alive) {
  if (closed_) return;
  keep_alive_ = keep_alive;
  answering_ = true;
  Respond(static_cast<int>(status), "application/json",
          absl::StrCat(R"({"error":{"message":")", message,
                       R"(","type":"invalid_request_error","param":null,"code":)",
                       static_cast<int>(status), "}}"),
          {});
}

void Session::Respond(int status, std::string content_type, std::string body, HttpHeaders headers) {
  if (closed_ || !answering_) return;
  http::response<http::string_body> response(static_cast<http::status>(status), 11);
  response.set(http::field::server, "attnserve");
  response.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) response.set(name, value);
  response.keep_alive(keep_alive_);
  response.body() = std::move(body);
  response.prepare_payload();
  std::ostringstream bytes;
  bytes << response;
  Write(std::move(bytes).str(), Part::kLast);
}

void Session::StartStream(int status, std::string content_type) {
  if (closed_ || !answering_) return;
  streaming_ = true;
  // A stream's chunks wait in the kernel's send buffer while its client does not read. Linux
  // grows that buffer up to megabytes (tcp_wmem), which memory the cgroup is charged with and
  // during which the scheduler sees every chunk as sent and keeps decoding: kept small, the
  // chunks back up here instead, and the stream is paused after a few (max_unsent_events).
  beast::error_code ignored;
  Tcp().socket().set_option(asio::socket_base::send_buffer_size(kStreamSendBufferBytes), ignored);
  // The header alone: serializing a chunked message would end it with its last chunk.
  Write(absl::StrCat("HTTP/1.1 ", status, " ",
                     std::string(http::obsolete_reason(static_cast<http::status>(status))),
                     "\r\nServer: attnserve\r\nContent-Type: ", content_type,
                     "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n",
                     keep_alive_ ? "" : "Connection: close\r\n", "\r\n"),
        Part::kHeader);
}

void Session::Chunk(std::string data) {
  if (closed_ || !answering_ || !streaming_ || data.empty()) {
    unsent.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  std::string framed = absl::StrCat(absl::Hex(data.size()), "\r\n");
  framed.append(data);
  framed.append("\r\n");
  Write(std::move(framed), Part::kChunk);
}

void Session::EndStream() {
  if (closed_ || !answering_ || !streaming_) return;
  Write("0\r\n\r\n", Part::kLast);
}

void Session::Write(std::string bytes, Part part) {
  writes_.emplace_back(std::move(bytes), part);
  if (!writing_) WriteNext();
}

void Session::WriteNext() {
  if (writes_.empty() || closed_) return;
  writing_ = true;
  // A client that reads nothing for write_timeout is gone: its connection and its work go.
  Tcp().expires_after(ToChrono(listener_.limits().write_timeout));
  // deque elements stay put while others are added behind them
  WithStream([&](auto& stream) {
    asio::async_write(stream, asio::buffer(writes_.front().first),
                      [self = shared_from_this()](beast::error_code error, size_t) {
                        self->writing_ = false;
                        if (self->closed_) return;
                        if (error) return self->Gone();
                        self->Tcp().expires_never();
                        const Part part = self->writes_.front().second;
                        self->writes_.pop_front();
                        if (part == Part::kChunk) self->unsent.fetch_sub(1);
                        if (self->written) self->written();
                        if (part == Part::kLast) return self->Finished();
                        self->WriteNext();
                      });
  });
}

// Chunks never to be written leave the count of those unsent.
void Session::DropWrites() {
  for (const auto& write : writes_) {
    if (write.second == Part::kChunk) unsent.fetch_sub(1);
  }
  writes_.clear();
}

void Session::Finished() {
  answering_ = false;
  streaming_ = false;
  gone = nullptr;
  written = nullptr;
  ++request_generation_;
  beast::error_code ignored;
  Tcp().socket().cancel(ignored);  // the watch for a client gone
  close_watch_->cancel();
  if (!keep_alive_) return Linger();
  ReadHeader();
}

// Closing a socket with request bytes still unread sends a reset, which can destroy the answer
// before the client reads it (a body refused for its size is still on its way): the bytes are
// read and dropped for a while first, as nginx's lingering close does.
void Session::Linger() {
  closed_ = true;
  beast::error_code ignored;
  Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
  Tcp().expires_after(std::chrono::seconds(2));
  Drain(std::make_shared<std::array<char, 16384>>(), int64_t{64} << 20);
}

void Session::Drain(std::shared_ptr<std::array<char, 16384>> buffer, int64_t left) {
  // The raw bytes, TLS records or not: they are dropped.
  Tcp().async_read_some(asio::buffer(*buffer), [self = shared_from_this(), buffer, left](
                                                   beast::error_code error, size_t read) {
    if (error || static_cast<int64_t>(read) >= left) return self->Tcp().close();
    self->Drain(buffer, left - static_cast<int64_t>(read));
  });
}

}  // namespace

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              const HttpLimits& limits,
                                                              HttpHandler& handler,
                                                              const std::optional<HttpTls>& tls) {
  auto server = std::make_unique<Listener>(limits, handler);
  if (tls) {
    if (auto status = server->UseTls(*tls); !status.ok()) return status;
  }
  if (auto status = server->Listen(host, port); !status.ok()) return status;
  return server;
}

}  // namespace attnserve::server
