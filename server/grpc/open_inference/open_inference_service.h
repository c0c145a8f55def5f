// The Open Inference Protocol (KServe v2's inference.GRPCInferenceService) beside attnserve.v1,
// on the same port: liveness, readiness, metadata, and ModelInfer, which goes through the same
// admission, validation, budgets and queue as attnserve.v1 (server/frontend/admission.h). Tensors
// and names: server/open_inference/infer_models.h, docs/open-inference.md.
#pragma once

#include <grpcpp/grpcpp.h>

#include "proto/inference/grpc_predict_v2.grpc.pb.h"
#include "server/frontend/admission.h"

namespace attnserve::server {

// Every method on raw bytes, decoded by the service itself (server/grpc/wire_format.h).
using RawOpenInferenceService = inference::GRPCInferenceService::WithRawCallbackMethod_ServerLive<
    inference::GRPCInferenceService::WithRawCallbackMethod_ServerReady<
        inference::GRPCInferenceService::WithRawCallbackMethod_ModelReady<
            inference::GRPCInferenceService::WithRawCallbackMethod_ServerMetadata<
                inference::GRPCInferenceService::WithRawCallbackMethod_ModelMetadata<
                    inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
                        inference::GRPCInferenceService::Service>>>>>>;

class OpenInferenceService final : public RawOpenInferenceService {
 public:
  explicit OpenInferenceService(const Admission& admission) : admission_(admission) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  // Ready until shutdown begins (every model loaded before the server started listening).
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  // False for a name that is not served, as for a server that is shutting down.
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

 private:
  const Admission& admission_;
};

}  // namespace attnserve::server
