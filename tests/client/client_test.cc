// The client library against a scripted in-process server: retries on UNAVAILABLE only,
// deadlines, asynchronous calls, streaming and TLS option checks.
#include "client/client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace attnserve::client {
namespace {

// Answers NextToken with the scripted codes in turn (then OK), counting the calls.
class ScriptedService final : public v1::Inference::Service {
 public:
  void Script(std::deque<grpc::StatusCode> codes) {
    absl::MutexLock lock(&mutex_);
    codes_ = std::move(codes);
  }
  int calls() const { return calls_.load(); }
  absl::Duration delay = absl::ZeroDuration();

  grpc::Status NextToken(grpc::ServerContext*, const v1::NextTokenRequest* request,
                         v1::NextTokenResponse* response) override {
    ++calls_;
    absl::SleepFor(delay);
    {
      absl::MutexLock lock(&mutex_);
      if (!codes_.empty()) {
        const grpc::StatusCode code = codes_.front();
        codes_.pop_front();
        if (code != grpc::StatusCode::OK) return grpc::Status(code, "scripted");
      }
    }
    response->set_model(request->model());
    return grpc::Status::OK;
  }

  grpc::Status Generate(grpc::ServerContext*, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    for (int i = 0; i < request->max_tokens(); ++i) {
      v1::GenerateResponse event;
      event.mutable_token()->set_id(i);
      writer->Write(event);
    }
    v1::GenerateResponse finish;
    finish.mutable_finish()->set_reason(v1::FINISH_REASON_MAX_TOKENS);
    writer->Write(finish);
    return grpc::Status::OK;
  }

 private:
  std::atomic<int> calls_{0};
  absl::Mutex mutex_;
  std::deque<grpc::StatusCode> codes_ ABSL_GUARDED_BY(mutex_);
};

class ClientTest : public testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<Client> Connect(int attempts = 4) {
    ChannelOptions options;
    options.target = "127.0.0.1:" + std::to_string(port_);
    options.retry.max_attempts = attempts;
    options.retry.initial_backoff = absl::Milliseconds(10);
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  v1::NextTokenRequest Request() {
    v1::NextTokenRequest request;
    request.set_model("m");
    return request;
  }

  ScriptedService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(ClientTest, RetriesUnavailableUntilItSucceeds) {
  service_.Script({grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::UNAVAILABLE});
  auto response = Connect()->NextToken(Request());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->model(), "m");
  EXPECT_EQ(service_.calls(), 3);
}

TEST_F(ClientTest, GivesUpAfterMaxAttempts) {
  service_.Script({grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::UNAVAILABLE,
                   grpc::StatusCode::UNAVAILABLE});
  auto response = Connect(/*attempts=*/2)->NextToken(Request());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(service_.calls(), 2);
}

TEST_F(ClientTest, DoesNotRetryTheCallersMistakes) {
  service_.Script({grpc::StatusCode::INVALID_ARGUMENT});
  auto response = Connect()->NextToken(Request());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(response.status().message(), "scripted");
  EXPECT_EQ(service_.calls(), 1);
}

TEST_F(ClientTest, HonoursTheDeadline) {
  service_.delay = absl::Milliseconds(500);
  CallOptions call;
  call.timeout = absl::Milliseconds(50);
  const absl::Time start = absl::Now();
  auto response = Connect()->NextToken(Request(), call);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(400));
}

TEST_F(ClientTest, AsynchronousCallsRunConcurrently) {
  service_.delay = absl::Milliseconds(100);
  auto client = Connect();
  constexpr int kCalls = 8;
  absl::Mutex mutex;
  int done = 0, ok = 0;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kCalls; ++i) {
    client->NextTokenAsync(Request(), [&](absl::StatusOr<v1::NextTokenResponse> response) {
      absl::MutexLock lock(&mutex);
      ++done;
      if (response.ok() && response->model() == "m") ++ok;
    });
  }
  absl::MutexLock lock(&mutex);
  mutex.Await(absl::Condition(
      +[](int* count) { return *count == kCalls; }, &done));
  EXPECT_EQ(ok, kCalls);
  // Eight 100 ms calls one after another would take 800 ms.
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(700));
}

TEST_F(ClientTest, AsynchronousErrorsReachTheCallback) {
  service_.Script({grpc::StatusCode::NOT_FOUND});
  absl::Notification finished;
  absl::Status status;
  Connect()->NextTokenAsync(Request(), [&](absl::StatusOr<v1::NextTokenResponse> response) {
    status = response.status();
    finished.Notify();
  });
  finished.WaitForNotification();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, GenerateDeliversEveryEventInOrder) {
  v1::GenerateRequest request;
  request.set_max_tokens(5);
  std::vector<int64_t> ids;
  bool finished = false;
  const absl::Status status = Connect()->Generate(request, [&](const v1::GenerateResponse& event) {
    if (event.has_token()) ids.push_back(event.token().id());
    if (event.has_finish()) finished = true;
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ids, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(finished);
}

TEST(ClientOptionsTest, RefusesUnreadableOrInconsistentTlsOptions) {
  ChannelOptions options;
  options.tls = true;
  options.ca_file = "/nonexistent/ca.pem";
  auto client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(client.status().message().find("/nonexistent/ca.pem"), std::string::npos);

  options = ChannelOptions();
  options.tls = true;
  options.cert_file = "/tmp/cert.pem";  // without its key
  EXPECT_EQ(Client::Connect(options).status().code(), absl::StatusCode::kInvalidArgument);

  options = ChannelOptions();
  options.ca_file = "/tmp/ca.pem";  // TLS files without TLS
  EXPECT_EQ(Client::Connect(options).status().code(), absl::StatusCode::kInvalidArgument);

  options = ChannelOptions();
  options.retry.max_attempts = 6;  // beyond gRPC's limit
  EXPECT_EQ(Client::Connect(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnserve::client
