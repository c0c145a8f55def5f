#include "server/grpc/open_inference/open_inference_service.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/grpc/calls.h"
#include "server/grpc/wire_format.h"
#include "server/open_inference/infer_answers.h"
#include "server/open_inference/infer_call.h"
#include "server/open_inference/infer_models.h"
#include "server/open_inference/infer_requests.h"
#include "server/ops/call_scope.h"

namespace attnserve::server {
namespace {

// Answers a metadata RPC on the calling thread: `answer(request)` or its error. Liveness and
// readiness are open to all, as probes are; the rest need a key when `admission` requires one.
template <typename Request, typename Answer>
grpc::ServerUnaryReactor* AnswerNow(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer& bytes, grpc::ByteBuffer* response,
                                    const Admission* admission, Answer answer) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Request request;
  absl::Status status =
      admission != nullptr ? OriginOf(*context, *admission).status() : absl::OkStatus();
  if (status.ok()) status = DecodeRequest(bytes, request);
  if (status.ok()) {
    auto answered = answer(request);
    if (answered.ok()) {
      *response = EncodeMessage(*answered);
    } else {
      status = answered.status();
    }
  }
  reactor->Finish(ToGrpc(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* OpenInferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return AnswerNow<inference::ServerLiveRequest>(
      context, *request, response, nullptr,
      [](const auto&) -> absl::StatusOr<inference::ServerLiveResponse> {
        inference::ServerLiveResponse live;
        live.set_live(true);
        return live;
      });
}

grpc::ServerUnaryReactor* OpenInferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return AnswerNow<inference::ServerReadyRequest>(
      context, *request, response, nullptr,
      [this](const auto&) -> absl::StatusOr<inference::ServerReadyResponse> {
        inference::ServerReadyResponse ready;
        ready.set_ready(admission_.accepting());
        return ready;
      });
}

grpc::ServerUnaryReactor* OpenInferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return AnswerNow<inference::ModelReadyRequest>(
      context, *request, response, nullptr,
      [this](const inference::ModelReadyRequest& asked)
          -> absl::StatusOr<inference::ModelReadyResponse> {
        inference::ModelReadyResponse ready;
        ready.set_ready(admission_.accepting() &&
                        FindInferModel(admission_.repository(), asked.name()).ok() &&
                        CheckModelVersion(asked.name(), asked.version()).ok());
        return ready;
      });
}

grpc::ServerUnaryReactor* OpenInferenceService::ServerMetadata(grpc::CallbackServerContext* context,
                                                               const grpc::ByteBuffer* request,
                                                               grpc::ByteBuffer* response) {
  return AnswerNow<inference::ServerMetadataRequest>(
      context, *request, response, &admission_,
      [](const auto&) -> absl::StatusOr<inference::ServerMetadataResponse> {
        inference::ServerMetadataResponse metadata;
        metadata.set_name("attnserve");
        metadata.set_version(ATTNSERVE_VERSION);
        return metadata;
      });
}

grpc::ServerUnaryReactor* OpenInferenceService::ModelMetadata(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* request,
                                                              grpc::ByteBuffer* response) {
  return AnswerNow<inference::ModelMetadataRequest>(
      context, *request, response, &admission_,
      [this](const inference::ModelMetadataRequest& asked)
          -> absl::StatusOr<inference::ModelMetadataResponse> {
        ASSIGN_OR_RETURN(auto model, FindInferModel(admission_.repository(), asked.name()));
        RETURN_IF_ERROR(CheckModelVersion(asked.name(), asked.version()));
        inference::ModelMetadataResponse metadata;
        metadata.set_name(asked.name());
        DescribeInferModel(model, metadata);
        return metadata;
      });
}

grpc::ServerUnaryReactor* OpenInferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* bytes,
                                                           grpc::ByteBuffer* response) {
  inference::ModelInferRequest request;
  const absl::StatusOr<CallOrigin> origin = OriginOf(*context, admission_);
  InferStart start = PrepareModelInfer(
      admission_, origin.ok() ? DecodeRequest(*bytes, request) : origin.status(), request);
  auto* unary = new UnaryCall(
      CallScope(admission_.metrics(), start.label, "ModelInfer"), response,
      [answer = start.answer](Task& task) {
        // Takes the results apart as it goes, so that no more than two
        // copies of the answer exist at once.
        return EncodeMessage(InferResponse(*answer, task));
      },
      admission_.answers());
  StartModelInfer(admission_, origin, start, unary, /*answer_scale=*/1,
                  [unary](absl::StatusOr<inference::ModelInferResponse> answer) {
                    unary->Answer(answer.ok() ? EncodeMessage(*answer)
                                              : absl::StatusOr<grpc::ByteBuffer>(answer.status()));
                  });
  return unary;
}

}  // namespace attnserve::server
