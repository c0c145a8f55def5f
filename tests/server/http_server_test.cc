// The HTTP server (server/http/http_server.h) with a handler that answers from other threads, as
// the engine loop does: whole answers, streams of chunks, keep-alive, the limits, a client gone
// while its answer is made, and a shutdown with answers in progress. Raw sockets play the
// clients, so every byte on the wire is checked. Also run under ThreadSanitizer (make
// test-tsan): Asio is header-only, so TSan sees its hand-offs.
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attnserve::server {
namespace {

// Answers from a thread of its own, after a short wait, as the engine loop would:
//   /echo: the body back; /stream: three chunks; /hold: nothing until the client goes.
class ThreadedHandler final : public HttpHandler {
 public:
  ~ThreadedHandler() override { Join(); }
  // Its answering threads are done (before the server goes: they post to it).
  void Join() {
    std::lock_guard lock(mutex_);
    for (auto& thread : threads_) thread.join();
    threads_.clear();
  }
  void Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) override {
    if (request.target == "/hold") {
      responder->OnGone([this, responder] {
        gone_ = true;
        responder->Respond(500, "text/plain", "nobody reads this");
      });
      std::lock_guard lock(mutex_);
      held_.push_back(responder);
      return;
    }
    std::lock_guard lock(mutex_);
    threads_.emplace_back([request = std::move(request), responder] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (request.target == "/stream") {
        responder->StartStream(200, "text/event-stream");
        for (int i = 0; i < 3; ++i) responder->Chunk(absl::StrCat("data: ", i, "\n\n"));
        responder->EndStream();
      } else {
        responder->Respond(200, "text/plain", absl::StrCat(request.method, " ", request.body));
      }
    });
  }
  bool gone() const { return gone_; }
  void ReleaseHeld() {
    std::lock_guard lock(mutex_);
    for (auto& responder : held_) responder->Respond(200, "text/plain", "released");
    held_.clear();
  }

 private:
  std::mutex mutex_;
  std::vector<std::thread> threads_;
  std::vector<std::shared_ptr<HttpResponder>> held_;
  std::atomic<bool> gone_{false};
};

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

void Send(int fd, const std::string& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// Reads until `done` holds for what was read, the peer closes, or 10 s pass.
std::string ReadUntil(int fd, const std::function<bool(const std::string&)>& done) {
  std::string read;
  char buffer[4096];
  while (!done(read)) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    read.append(buffer, n);
  }
  return read;
}

std::string ReadAnswer(int fd) {
  return ReadUntil(fd, [](const std::string& s) {
    const size_t end = s.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    const size_t length = s.find("Content-Length: ");
    if (length == std::string::npos) return absl::EndsWith(s, "0\r\n\r\n");
    return s.size() >= end + 4 + std::stoul(s.substr(length + 16));
  });
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpLimits limits = {}) {
    limits.threads = 2;
    auto started = HttpServer::Start("127.0.0.1", 0, limits, handler_);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }
  void TearDown() override {
    handler_.Join();
    if (server_) server_->Shutdown(absl::Now() + absl::Seconds(2));
  }
  ThreadedHandler handler_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, AnswersFromOtherThreadsOnAKeptAliveConnection) {
  Start();
  const int fd = Connect(server_->port());
  for (int i = 0; i < 3; ++i) {
    Send(fd, absl::StrCat("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"));
    const std::string answer = ReadAnswer(fd);
    EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200 OK\r\n")) << answer;
    EXPECT_TRUE(absl::EndsWith(answer, "\r\n\r\nPOST hello")) << answer;
  }
  close(fd);
}

TEST_F(HttpServerTest, StreamsChunksThenTheLastChunk) {
  Start();
  const int fd = Connect(server_->port());
  Send(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string answer = ReadAnswer(fd);
  EXPECT_TRUE(absl::StrContains(answer, "Transfer-Encoding: chunked\r\n")) << answer;
  EXPECT_TRUE(absl::EndsWith(answer,
                             "\r\n\r\n9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n"
                             "9\r\ndata: 2\n\n\r\n0\r\n\r\n"))
      << answer;
  close(fd);
}

TEST_F(HttpServerTest, ManyConnectionsAtOnce) {
  Start();
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (int i = 0; i < 16; ++i) {
    clients.emplace_back([&, i] {
      const int fd = Connect(server_->port());
      const std::string body = absl::StrCat("client ", i);
      Send(fd, absl::StrCat("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(),
                            "\r\n\r\n", body));
      if (absl::EndsWith(ReadAnswer(fd), "POST " + body)) ++answered;
      close(fd);
    });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(answered.load(), 16);
}

TEST_F(HttpServerTest, RefusesWhatIsTooLargeNamingTheLimit) {
  HttpLimits limits;
  limits.max_body_bytes = 100;
  limits.max_header_bytes = 1024;
  Start(limits);
  int fd = Connect(server_->port());
  Send(fd,
       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + std::string(1000, 'x'));
  std::string answer = ReadAnswer(fd);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 413")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "the request's body is over 100 bytes")) << answer;
  close(fd);
  fd = Connect(server_->port());
  Send(fd, "GET /echo HTTP/1.1\r\nX-Big: " + std::string(2000, 'y') + "\r\n\r\n");
  answer = ReadAnswer(fd);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 431")) << answer;
  close(fd);
  fd = Connect(server_->port());
  Send(fd, "NOT HTTP AT ALL\r\n\r\n");
  answer = ReadAnswer(fd);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 400")) << answer;
  close(fd);
}

TEST_F(HttpServerTest, CutsOffARequestThatTakesTooLong) {
  HttpLimits limits;
  limits.read_timeout = absl::Milliseconds(300);
  Start(limits);
  const int fd = Connect(server_->port());
  Send(fd, "GET /echo HTTP/1.1\r\n");
  const absl::Time start = absl::Now();
  char byte;
  EXPECT_EQ(recv(fd, &byte, 1, 0), 0);  // closed, without an answer
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  close(fd);
}

TEST_F(HttpServerTest, TellsTheHandlerWhenTheClientGoes) {
  Start();
  const int fd = Connect(server_->port());
  Send(fd, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(handler_.gone());
  close(fd);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!handler_.gone() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(handler_.gone());
  handler_.ReleaseHeld();  // answers nobody reads: dropped
}

TEST_F(HttpServerTest, ShutdownLetsAnAnswerInProgressOut) {
  Start();
  const int fd = Connect(server_->port());
  Send(fd, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    handler_.ReleaseHeld();
  });
  server_->Shutdown(absl::Now() + absl::Seconds(5));
  release.join();
  const std::string answer = ReadAnswer(fd);
  EXPECT_TRUE(absl::EndsWith(answer, "released")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "Connection: close")) << answer;
  close(fd);
}

}  // namespace
}  // namespace attnserve::server
