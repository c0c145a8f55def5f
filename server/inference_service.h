// The attnserve.v1.Inference service on gRPC's callback API: validates each request and hands it
// to the model's scheduler, which answers the call itself (server/calls.h). Deadlines and
// cancellations reach the scheduler through the task.
#pragma once

#include <grpcpp/grpcpp.h>

#include "proto/attnserve/v1/inference.grpc.pb.h"
#include "server/call_gate.h"
#include "server/calls.h"
#include "server/model_repository.h"
#include "server/request_validation.h"

namespace attnserve::server {

class InferenceService final : public v1::Inference::CallbackService {
 public:
  // Inference calls are admitted through `gate`, which shutdown closes.
  InferenceService(const ModelRepository& repository, ServerMetrics& metrics, CallGate& gate)
      : repository_(repository), metrics_(metrics), gate_(gate) {}

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const v1::GetModelRequest* request,
                                     v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* NextToken(grpc::CallbackServerContext* context,
                                      const v1::NextTokenRequest* request,
                                      v1::NextTokenResponse* response) override;
  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* context,
                                  const v1::EmbedRequest* request,
                                  v1::EmbedResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context,
                                  const v1::ScoreRequest* request,
                                  v1::ScoreResponse* response) override;

 private:
  template <typename Request>
  using Validator = absl::Status (*)(const Request&, const ModelWorker&, Task&);
  // Every inference RPC: route, validate, queue; the scheduler answers `call` from then on. A
  // request refused on the way is answered here.
  template <typename Request, typename Call>
  void Start(grpc::CallbackServerContext* context, const char* method, TaskKind kind,
             const Request& request, Validator<Request> validate, Call* call) const;
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, const char* method,
                                  TaskKind kind, const Request& request, Response* response,
                                  Validator<Request> validate, Response Task::*result) const;

  std::string ModelLabel(const std::string& model) const;
  // The worker for `model` if it exists and answers `method`.
  absl::StatusOr<ModelWorker*> Route(const std::string& model, const std::string& method) const;

  const ModelRepository& repository_;
  ServerMetrics& metrics_;
  CallGate& gate_;
};

}  // namespace attnserve::server
