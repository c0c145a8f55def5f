#include "server/grpc/open_inference/open_inference_service.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/frontend/request_validation.h"
#include "server/frontend/tokenization.h"
#include "server/grpc/calls.h"
#include "server/grpc/open_inference/infer_answers.h"
#include "server/grpc/open_inference/infer_models.h"
#include "server/grpc/open_inference/infer_requests.h"
#include "server/grpc/wire_format.h"
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

absl::Status CheckVersion(const std::string& name, const std::string& version) {
  if (version.empty() || version == kModelVersion) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("model ", name.substr(0, 128), " has version ",
                                          kModelVersion, " only, not \"", version.substr(0, 32),
                                          "\""));
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
                        CheckVersion(asked.name(), asked.version()).ok());
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
        RETURN_IF_ERROR(CheckVersion(asked.name(), asked.version()));
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
  absl::Status prepared = origin.ok() ? DecodeRequest(*bytes, request) : origin.status();
  absl::StatusOr<InferCall> call = absl::UnknownError("not translated");
  std::string label = "_unknown";
  if (prepared.ok()) {
    auto model = FindInferModel(admission_.repository(), request.model_name());
    if (model.ok()) label = model->worker->name();
    prepared =
        model.ok() ? CheckVersion(request.model_name(), request.model_version()) : model.status();
    if (prepared.ok()) {
      call = TranslateInferRequest(*model, request);
      prepared = call.status();
    }
  }
  // What answering needs, kept by the call; the request itself goes once validated.
  auto answer =
      std::make_shared<InferAnswer>(prepared.ok() ? std::move(call->answer) : InferAnswer());
  auto* unary = new UnaryCall(
      CallScope(admission_.metrics(), label, "ModelInfer"), response,
      [answer](Task& task) {
        // Takes the results apart as it goes, so that no more than two
        // copies of the answer exist at once.
        return EncodeMessage(InferResponse(*answer, task));
      },
      admission_.answers());
  const InferFieldNames names(*answer);
  const std::string model = prepared.ok() ? answer->model.worker->name() : "";
  // Validation names the request's tensors and parameters.
  auto validating = [&](auto validate, const auto& input) {
    return [&, validate](const EngineLoop& worker, Task& task) {
      if (task.kind == TaskKind::kEmbed) task.embed().pad_token_states = answer->token_states;
      if (task.kind == TaskKind::kGenerate) task.generate().collect_events = true;
      return validate(input, names, worker, task);
    };
  };
  if (!prepared.ok()) {
    admission_.Start(
        origin, model, "", TaskKind::kNextToken, prepared,
        [](const EngineLoop&, Task&) { return absl::OkStatus(); }, unary);
    return unary;
  }
  switch (answer->model.method) {
    case InferMethod::kNextToken:
      admission_.Start(origin, model, "NextToken", TaskKind::kNextToken, prepared,
                       validating(ValidateNextToken, call->next_token), unary);
      break;
    case InferMethod::kEmbed:
      admission_.Start(origin, model, "Embed", TaskKind::kEmbed, prepared,
                       validating(ValidateEmbed, call->embed), unary);
      break;
    case InferMethod::kScore:
      admission_.Start(origin, model, "Score", TaskKind::kScore, prepared,
                       validating(ValidateScore, call->score), unary);
      break;
    case InferMethod::kGenerate:
      admission_.Start(origin, model, "Generate", TaskKind::kGenerate, prepared,
                       validating(ValidateGenerate, call->generate), unary);
      break;
    // Answered here, on the calling thread, as on attnserve.v1.
    case InferMethod::kTokenize: {
      auto tokens = Tokenize(call->tokenize, names, *answer->model.worker);
      unary->Answer(tokens.ok() ? EncodeMessage(InferResponse(*answer, *tokens))
                                : absl::StatusOr<grpc::ByteBuffer>(tokens.status()));
      break;
    }
    case InferMethod::kDetokenize: {
      auto text = Detokenize(call->detokenize, names, *answer->model.worker);
      unary->Answer(text.ok() ? EncodeMessage(InferResponse(*answer, *text))
                              : absl::StatusOr<grpc::ByteBuffer>(text.status()));
      break;
    }
  }
  return unary;
}

}  // namespace attnserve::server
