// What the fuzz targets that call a service share: a server over the fuzzing model repository
// (ATTNSERVE_FUZZ_MODELS: a causal LM, an encoder-decoder and an encoder), reached through an
// in-process channel, and the checks every call and every input must pass.
#pragma once

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "server/frontend/admission.h"
#include "server/ops/server_metrics.h"

namespace attnserve::server {

// Aborts, which libFuzzer reports as a crash with the input, when `condition` does not hold.
inline void Require(bool condition, const std::string& what) {
  if (!condition) {
    std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
    std::abort();
  }
}

// Every call ends with OK or a refusal that names its problem: INVALID_ARGUMENT, NOT_FOUND for
// an unknown model, RESOURCE_EXHAUSTED for a budget it can never fit.
inline void RequireAnswered(const grpc::Status& status, const std::string& method) {
  const auto code = status.error_code();
  Require(code == grpc::StatusCode::OK || code == grpc::StatusCode::INVALID_ARGUMENT ||
              code == grpc::StatusCode::NOT_FOUND || code == grpc::StatusCode::RESOURCE_EXHAUSTED,
          method + " ended with code " + std::to_string(code) + ": " + status.error_message());
  Require(status.ok() || !status.error_message().empty(), method + " refused without a message");
}

struct InProcessServer {
  prometheus::Registry registry;
  ServerMetrics server_metrics{registry};
  std::unique_ptr<ModelRepository> repository;
  CallGate gate;
  std::unique_ptr<Admission> admission;
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;

  // Once every call of an input has ended, nothing may still hold a sequence or wait in a queue.
  void RequireNothingOutstanding() {
    const double active = SumByLabel(server_metrics.active_sequences)[""];
    const double queued = SumByLabel(server_metrics.queue_length)[""];
    Require(active == 0 && queued == 0, "a sequence or a queued request outlived its call");
  }
};

// Loads the repository and serves `Service` (constructed from the admission) in process.
template <typename Service>
InProcessServer* StartInProcessServer() {
  const char* models = std::getenv("ATTNSERVE_FUZZ_MODELS");
  Require(models != nullptr, "set ATTNSERVE_FUZZ_MODELS to the fuzzing model repository");
  // Protobuf logs every malformed message as it refuses it; the refusal is what is tested, the
  // log lines would only bury libFuzzer's.
  google::protobuf::SetLogHandler(nullptr);
  auto* s = new InProcessServer;
  EngineLoopOptions options;
  options.max_batch_size = 4;
  // A 2 GiB process, as deploy/k8s/base allows: the budgets refuse what would not fit in it.
  s->repository =
      ModelRepository::Load(models, options, {int64_t{2} << 30, "fuzzer"}, s->server_metrics);
  Require(s->repository->workers().size() == 3 && s->repository->failures().empty(),
          std::string("the repository at ") + models + " must hold three models that load");
  s->admission = std::make_unique<Admission>(*s->repository, s->server_metrics, s->gate);
  s->service = std::make_unique<Service>(*s->admission);
  grpc::ServerBuilder builder;
  builder.RegisterService(s->service.get());
  s->server = builder.BuildAndStart();
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  s->channel = s->server->InProcessChannel(arguments);
  return s;
}

}  // namespace attnserve::server
