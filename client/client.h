// attnserve's C++ client: a channel to a server or its replicas (plain, TLS or mutual TLS;
// calls spread round-robin over every address the target resolves to), typed calls for every
// RPC, synchronous and asynchronous, with deadlines and retries.
//
// Retries are gRPC's own (a service-config retryPolicy): a call that gets UNAVAILABLE (the
// server unreachable, its queue full, or draining) is tried again with exponential backoff and
// jitter, within the call's deadline. Nothing else is retried: other codes are the caller's or
// the model's, and trying again would get the same answer.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/attnserve/v1/inference.grpc.pb.h"

namespace attnserve::client {

namespace v1 = ::attnserve::v1;

struct RetryPolicy {
  int max_attempts = 4;  // the first call included; gRPC caps this at 5; 1 disables retries
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  double backoff_multiplier = 2.0;
};

struct ChannelOptions {
  std::string target = "localhost:50051";
  // TLS when `tls` is set: `ca_file` verifies the server (empty: the system's roots);
  // `cert_file` and `key_file` together present a client certificate (mutual TLS).
  bool tls = false;
  std::string ca_file, cert_file, key_file;
  std::string server_name;  // the name to verify the server's certificate against, if not target's
  RetryPolicy retry;
};

struct CallOptions {
  absl::Duration timeout = absl::Seconds(30);
  // Sent as `authorization: Bearer <key>` when the server requires API keys.
  std::string api_key;
  // Wait for the server to come up instead of failing at once when it cannot be reached.
  bool wait_for_ready = false;
};

class Client {
 public:
  // Reads the TLS files and creates the channel; connecting happens on the first call.
  // INVALID_ARGUMENT names an unreadable file or an inconsistent option.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ChannelOptions& options);

  absl::StatusOr<v1::ListModelsResponse> ListModels(const CallOptions& call = {});
  absl::StatusOr<v1::ModelInfo> GetModel(const std::string& model, const CallOptions& call = {});
  absl::StatusOr<v1::NextTokenResponse> NextToken(const v1::NextTokenRequest& request,
                                                  const CallOptions& call = {});
  absl::StatusOr<v1::EmbedResponse> Embed(const v1::EmbedRequest& request,
                                          const CallOptions& call = {});
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request,
                                                const CallOptions& call = {});
  absl::StatusOr<v1::DetokenizeResponse> Detokenize(const v1::DetokenizeRequest& request,
                                                    const CallOptions& call = {});
  absl::StatusOr<v1::ScoreResponse> Score(const v1::ScoreRequest& request,
                                          const CallOptions& call = {});
  // Calls `on_event` for every streamed message as it arrives, then returns the call's status.
  absl::Status Generate(const v1::GenerateRequest& request,
                        const std::function<void(const v1::GenerateResponse&)>& on_event,
                        const CallOptions& call = {});

  // grpc.health.v1: whether the server (service "") or one service is SERVING.
  absl::StatusOr<bool> Serving(const std::string& service = "", const CallOptions& call = {});

  // Asynchronous calls return at once; `done` runs on a gRPC thread when the call ends. Many
  // may be in flight on the one channel.
  template <typename Response>
  using Done = std::function<void(absl::StatusOr<Response>)>;
  void NextTokenAsync(const v1::NextTokenRequest& request, Done<v1::NextTokenResponse> done,
                      const CallOptions& call = {});
  void EmbedAsync(const v1::EmbedRequest& request, Done<v1::EmbedResponse> done,
                  const CallOptions& call = {});
  void ScoreAsync(const v1::ScoreRequest& request, Done<v1::ScoreResponse> done,
                  const CallOptions& call = {});

  v1::Inference::Stub& stub() { return *stub_; }

  // Waits for the asynchronous calls still in flight: they run on the channel's threads.
  ~Client();

 private:
  explicit Client(std::shared_ptr<grpc::Channel> channel);
  template <typename Request, typename Response, typename Method>
  void StartAsync(Method method, const Request& request, Done<Response> done,
                  const CallOptions& call);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::mutex mutex_;  // guards async_in_flight_
  std::condition_variable all_answered_;
  int64_t async_in_flight_ = 0;
};

// The gRPC status as an absl::Status: the codes are the same numbers.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace attnserve::client
