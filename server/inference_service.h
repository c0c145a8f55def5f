// The attnserve.v1.Inference service: validates each request, hands it to the model's
// scheduler and waits for the result on the gRPC thread, honouring deadlines and cancellation.
#pragma once

#include <grpcpp/grpcpp.h>

#include "proto/attnserve/v1/inference.grpc.pb.h"
#include "server/model_repository.h"
#include "server/request_validation.h"

namespace attnserve::server {

class InferenceService final : public v1::Inference::Service {
 public:
  InferenceService(const ModelRepository& repository, ServerMetrics& metrics)
      : repository_(repository), metrics_(metrics) {}

  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;
  grpc::Status GetModel(grpc::ServerContext* context, const v1::GetModelRequest* request,
                        v1::ModelInfo* response) override;
  grpc::Status NextToken(grpc::ServerContext* context, const v1::NextTokenRequest* request,
                         v1::NextTokenResponse* response) override;
  grpc::Status Embed(grpc::ServerContext* context, const v1::EmbedRequest* request,
                     v1::EmbedResponse* response) override;
  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                     v1::ScoreResponse* response) override;

 private:
  template <typename Request>
  using Validator = absl::Status (*)(const Request&, const ModelWorker&, Task&);
  // The shape of every unary inference RPC: route, validate, queue, wait, answer, count.
  template <typename Request, typename Response>
  grpc::Status Unary(grpc::ServerContext* context, const char* method, TaskKind kind,
                     const Request& request, Response* response, Validator<Request> validate,
                     Response Task::*result) const;

  std::string ModelLabel(const std::string& model) const;
  // The worker for `model` if it exists and answers `method`.
  absl::StatusOr<ModelWorker*> Route(const std::string& model, const std::string& method) const;
  // Submits the task and waits for it; Generate's events go to `writer` as they come.
  absl::Status Run(grpc::ServerContext* context, ModelWorker& worker,
                   const std::shared_ptr<Task>& task,
                   grpc::ServerWriter<v1::GenerateResponse>* writer = nullptr) const;

  const ModelRepository& repository_;
  ServerMetrics& metrics_;
};

}  // namespace attnserve::server
