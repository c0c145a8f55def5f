// The attnserve.v1.Inference service on gRPC's callback API: validates each request and hands it
// to the model's scheduler, which answers the call itself (server/grpc/calls.h). Deadlines and
// cancellations reach the scheduler through the task.
#pragma once

#include <grpcpp/grpcpp.h>

#include "proto/attnserve/v1/inference.grpc.pb.h"
#include "server/frontend/admission.h"
#include "server/frontend/method_inputs.h"
#include "server/grpc/calls.h"

namespace attnserve::server {

// Every method on raw bytes, decoded by the service itself (server/grpc/wire_format.h).
using RawInferenceService = v1::Inference::WithRawCallbackMethod_ListModels<
    v1::Inference::WithRawCallbackMethod_GetModel<v1::Inference::WithRawCallbackMethod_NextToken<
        v1::Inference::WithRawCallbackMethod_Embed<v1::Inference::WithRawCallbackMethod_Generate<
            v1::Inference::WithRawCallbackMethod_Score<
                v1::Inference::WithRawCallbackMethod_Classify<
                    v1::Inference::WithRawCallbackMethod_Rerank<
                        v1::Inference::WithRawCallbackMethod_Tokenize<
                            v1::Inference::WithRawCallbackMethod_Detokenize<
                                v1::Inference::Service>>>>>>>>>>;

class InferenceService final : public RawInferenceService {
 public:
  explicit InferenceService(const Admission& admission) : admission_(admission) {}

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
  grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  // Answered on the calling thread (server/frontend/tokenization.h).
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

 private:
  // The caller's key, when the server requires one, then the request.
  template <typename Request>
  absl::Status Authenticated(const grpc::CallbackServerContext& context,
                             const grpc::ByteBuffer& bytes, Request& request) const;
  // Decodes the request, reads its input, routes it to a model that answers `method` and
  // answers with `answer(input, names, worker)` on this thread.
  template <typename Request, typename Input, typename Answer>
  grpc::ServerUnaryReactor* Direct(grpc::CallbackServerContext* context, const char* method,
                                   const grpc::ByteBuffer& bytes, grpc::ByteBuffer* response,
                                   Answer answer);
  // Decodes the request, reads its input and hands it to the model's scheduler through the
  // admission; `encode` makes the answer from the task's results.
  template <typename Request, typename Input>
  grpc::ServerUnaryReactor* Unary(
      grpc::CallbackServerContext* context, const char* method, TaskKind kind,
      const grpc::ByteBuffer& bytes, grpc::ByteBuffer* response,
      absl::Status (*validate)(const Input&, const FieldNames&, const EngineLoop&, Task&),
      grpc::ByteBuffer (*encode)(const std::string& model, Task& task)) const;

  const Admission& admission_;
};

}  // namespace attnserve::server
