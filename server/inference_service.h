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

// Every method on raw bytes, decoded by the service itself (server/wire_format.h).
using RawInferenceService = v1::Inference::WithRawCallbackMethod_ListModels<
    v1::Inference::WithRawCallbackMethod_GetModel<v1::Inference::WithRawCallbackMethod_NextToken<
        v1::Inference::WithRawCallbackMethod_Embed<v1::Inference::WithRawCallbackMethod_Generate<
            v1::Inference::WithRawCallbackMethod_Score<
                v1::Inference::WithRawCallbackMethod_Tokenize<
                    v1::Inference::WithRawCallbackMethod_Detokenize<v1::Inference::Service>>>>>>>>;

class InferenceService final : public RawInferenceService {
 public:
  // Inference calls are admitted through `gate`, which shutdown closes.
  InferenceService(const ModelRepository& repository, ServerMetrics& metrics, CallGate& gate)
      : repository_(repository), metrics_(metrics), gate_(gate) {}

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* NextToken(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  // Answered on the calling thread (server/tokenization.h).
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

 private:
  // Decodes the request, routes it to a model that answers `method` and answers with
  // `answer(request, worker)` on this thread.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Direct(grpc::CallbackServerContext* context, const char* method,
                                   const grpc::ByteBuffer& bytes, grpc::ByteBuffer* response,
                                   absl::StatusOr<Response> (*answer)(const Request&,
                                                                      const ModelWorker&));
  template <typename Request>
  using Validator = absl::Status (*)(const Request&, const ModelWorker&, Task&);
  // Every inference RPC: decode, route, validate, queue; the scheduler answers `call` from then
  // on. A request refused on the way is answered here.
  template <typename Request, typename Call>
  void Start(grpc::CallbackServerContext* context, const char* method, TaskKind kind,
             const Request& request, const absl::Status& decoded, Validator<Request> validate,
             Call* call) const;
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, const char* method,
                                  TaskKind kind, const grpc::ByteBuffer& bytes,
                                  grpc::ByteBuffer* response, Validator<Request> validate,
                                  Response Task::*result) const;

  std::string ModelLabel(const std::string& model) const;
  // The worker for `model` if it exists and answers `method`.
  absl::StatusOr<ModelWorker*> Route(const std::string& model, const std::string& method) const;

  const ModelRepository& repository_;
  ServerMetrics& metrics_;
  CallGate& gate_;
};

}  // namespace attnserve::server
