#include "client/client.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnserve::client {
namespace {

absl::StatusOr<std::string> ReadFile(const char* what, const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": cannot be read"));
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::string Seconds(absl::Duration duration) {
  return absl::StrFormat("%.3fs", absl::ToDoubleSeconds(duration));
}

// Calls spread over every address the target resolves to (round_robin): a headless Service's
// pods, or a list such as ipv4:10.0.0.1:50051,10.0.0.2:50051. One HTTP/2 connection would
// otherwise pin the client to one server. Then gRPC's retry policy for every method.
std::string ServiceConfig(const RetryPolicy& retry) {
  std::string retry_policy;
  if (retry.max_attempts > 1) {
    retry_policy = absl::StrFormat(
        R"(, "methodConfig": [{"name": [{"service": "attnserve.v1.Inference"}],
            "retryPolicy": {"maxAttempts": %d, "initialBackoff": "%s", "maxBackoff": "%s",
                            "backoffMultiplier": %f,
                            "retryableStatusCodes": ["UNAVAILABLE"]}}])",
        retry.max_attempts, Seconds(retry.initial_backoff), Seconds(retry.max_backoff),
        retry.backoff_multiplier);
  }
  return absl::StrCat(R"({"loadBalancingConfig": [{"round_robin": {}}])", retry_policy, "}");
}

void Prepare(grpc::ClientContext& context, const CallOptions& call) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + call.timeout));
  context.set_wait_for_ready(call.wait_for_ready);
  if (!call.api_key.empty()) context.AddMetadata("authorization", "Bearer " + call.api_key);
}

// What an asynchronous unary call owns until it ends.
template <typename Request, typename Response>
struct AsyncCall {
  grpc::ClientContext context;
  Request request;
  Response response;
  Client::Done<Response> done;
};

}  // namespace

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ChannelOptions& options) {
  if (options.retry.max_attempts < 1 || options.retry.max_attempts > 5) {
    return absl::InvalidArgumentError("retry attempts must be from 1 to 5 (gRPC's limit)");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_file.empty()) {
      auto ca = ReadFile("TLS CA file", options.ca_file);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    if (options.cert_file.empty() != options.key_file.empty()) {
      return absl::InvalidArgumentError("a client certificate and its key go together");
    }
    if (!options.cert_file.empty()) {
      auto cert = ReadFile("TLS certificate", options.cert_file);
      if (!cert.ok()) return cert.status();
      auto key = ReadFile("TLS key", options.key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    credentials = grpc::SslCredentials(ssl);
  } else if (!options.ca_file.empty() || !options.cert_file.empty() || !options.key_file.empty()) {
    return absl::InvalidArgumentError("TLS files were given without TLS");
  }
  grpc::ChannelArguments arguments;
  arguments.SetServiceConfigJSON(ServiceConfig(options.retry));
  arguments.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
  arguments.SetMaxReceiveMessageSize(64 << 20);
  if (!options.server_name.empty()) {
    arguments.SetSslTargetNameOverride(options.server_name);
  }
  return std::unique_ptr<Client>(
      new Client(grpc::CreateCustomChannel(options.target, credentials, arguments)));
}

Client::Client(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      stub_(v1::Inference::NewStub(channel_)),
      health_(grpc::health::v1::Health::NewStub(channel_)) {}

Client::~Client() {
  std::unique_lock lock(mutex_);
  all_answered_.wait(lock, [this] { return async_in_flight_ == 0; });
}

template <typename Request, typename Response, typename Method>
void Client::StartAsync(Method method, const Request& request, Done<Response> done,
                        const CallOptions& call) {
  {
    std::lock_guard lock(mutex_);
    ++async_in_flight_;
  }
  auto* state = new AsyncCall<Request, Response>{{}, request, {}, std::move(done)};
  Prepare(state->context, call);
  method(&state->context, &state->request, &state->response, [this, state](grpc::Status status) {
    {
      std::unique_ptr<AsyncCall<Request, Response>> owned(state);
      if (status.ok()) {
        owned->done(std::move(owned->response));
      } else {
        owned->done(FromGrpc(status));
      }
    }
    std::lock_guard lock(mutex_);  // last: the Client may be destroyed once this is released
    if (--async_in_flight_ == 0) all_answered_.notify_all();
  });
}

namespace {

// Every unary call: a deadline, the call, the status as an absl::Status.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> CallUnary(Stub& stub,
                                   grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                                const Request&, Response*),
                                   const Request& request, const CallOptions& call) {
  grpc::ClientContext context;
  Prepare(context, call);
  Response response;
  const grpc::Status status = (stub.*method)(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response;
}

}  // namespace

absl::StatusOr<v1::ListModelsResponse> Client::ListModels(const CallOptions& call) {
  return CallUnary(*stub_, &v1::Inference::Stub::ListModels, v1::ListModelsRequest(), call);
}

absl::StatusOr<v1::ModelInfo> Client::GetModel(const std::string& model, const CallOptions& call) {
  v1::GetModelRequest request;
  request.set_model(model);
  return CallUnary(*stub_, &v1::Inference::Stub::GetModel, request, call);
}

absl::StatusOr<v1::NextTokenResponse> Client::NextToken(const v1::NextTokenRequest& request,
                                                        const CallOptions& call) {
  return CallUnary(*stub_, &v1::Inference::Stub::NextToken, request, call);
}

absl::StatusOr<v1::EmbedResponse> Client::Embed(const v1::EmbedRequest& request,
                                                const CallOptions& call) {
  return CallUnary(*stub_, &v1::Inference::Stub::Embed, request, call);
}

absl::StatusOr<v1::ScoreResponse> Client::Score(const v1::ScoreRequest& request,
                                                const CallOptions& call) {
  return CallUnary(*stub_, &v1::Inference::Stub::Score, request, call);
}

absl::StatusOr<v1::TokenizeResponse> Client::Tokenize(const v1::TokenizeRequest& request,
                                                      const CallOptions& call) {
  return CallUnary(*stub_, &v1::Inference::Stub::Tokenize, request, call);
}

absl::StatusOr<v1::DetokenizeResponse> Client::Detokenize(const v1::DetokenizeRequest& request,
                                                          const CallOptions& call) {
  return CallUnary(*stub_, &v1::Inference::Stub::Detokenize, request, call);
}

absl::StatusOr<bool> Client::Serving(const std::string& service, const CallOptions& call) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  auto response = CallUnary(*health_, &grpc::health::v1::Health::Stub::Check, request, call);
  if (!response.ok()) return response.status();
  return response->status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::Status Client::Generate(const v1::GenerateRequest& request,
                              const std::function<void(const v1::GenerateResponse&)>& on_event,
                              const CallOptions& call) {
  grpc::ClientContext context;
  Prepare(context, call);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, request);
  v1::GenerateResponse event;
  while (reader->Read(&event)) on_event(event);
  return FromGrpc(reader->Finish());
}

void Client::NextTokenAsync(const v1::NextTokenRequest& request, Done<v1::NextTokenResponse> done,
                            const CallOptions& call) {
  StartAsync<v1::NextTokenRequest, v1::NextTokenResponse>(
      [this](auto... args) { stub_->async()->NextToken(args...); }, request, std::move(done), call);
}

void Client::EmbedAsync(const v1::EmbedRequest& request, Done<v1::EmbedResponse> done,
                        const CallOptions& call) {
  StartAsync<v1::EmbedRequest, v1::EmbedResponse>(
      [this](auto... args) { stub_->async()->Embed(args...); }, request, std::move(done), call);
}

void Client::ScoreAsync(const v1::ScoreRequest& request, Done<v1::ScoreResponse> done,
                        const CallOptions& call) {
  StartAsync<v1::ScoreRequest, v1::ScoreResponse>(
      [this](auto... args) { stub_->async()->Score(args...); }, request, std::move(done), call);
}

}  // namespace attnserve::client
