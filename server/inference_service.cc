#include "server/inference_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/request_validation.h"
#include "server/rpc_scope.h"
#include "server/tokenization.h"
#include "server/wire_format.h"

namespace attnserve::server {
namespace {

std::string PositionName(PositionKind kind) {
  switch (kind) {
    case PositionKind::kSinusoidal:
      return "sinusoidal";
    case PositionKind::kLearned:
      return "learned";
    case PositionKind::kAlibi:
      return "alibi";
    case PositionKind::kRope:
      return "rope";
    case PositionKind::kNone:
      return "none";
  }
  return "";
}

void Describe(const ModelWorker& worker, v1::ModelInfo& info) {
  const ModelConfig& c = worker.model().config;
  info.set_name(worker.name());
  info.set_architecture(c.architecture);
  info.set_vocab_size(c.vocab_size);
  info.set_input_dim(c.input_dim);
  info.set_max_context(c.max_positions);
  info.set_model_dim(c.model_dim);
  info.set_num_layers(c.num_layers);
  info.set_num_heads(c.num_heads);
  info.set_num_kv_heads(c.num_kv_heads);
  info.set_weights(c.weights.int8 ? "int8" : "float32");
  if (c.weights.int8) info.set_int8_group_size(c.weights.group_size);
  info.set_attention(c.attention == AttentionKind::kSoftmax     ? "softmax"
                     : c.attention == AttentionKind::kExclusive ? "exclusive"
                                                                : "linear");
  info.set_positions(PositionName(c.positions));
  info.set_norm(c.norm == NormKind::kLayerNorm ? "layer_norm"
                : c.norm == NormKind::kRmsNorm ? "rms_norm"
                                               : "scale_norm");
  if (const Tokenizer* tokenizer = worker.model().tokenizer.get()) {
    info.mutable_tokenizer()->set_type(tokenizer->type());
    info.mutable_tokenizer()->set_vocab_size(tokenizer->vocab_size());
    for (const auto& [text, id] : tokenizer->special_tokens()) {
      (*info.mutable_tokenizer()->mutable_special_tokens())[text] = id;
    }
  }
  for (const std::string& method : SupportedMethods(worker.model())) info.add_methods(method);
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::ListModels(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* bytes,
                                                       grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ListModelsRequest request;
  if (auto status = DecodeRequest(*bytes, request); !status.ok()) {
    reactor->Finish(ToGrpc(status));
    return reactor;
  }
  v1::ListModelsResponse response;
  for (const ModelWorker* worker : dispatcher_.repository().workers())
    Describe(*worker, *response.add_models());
  for (const auto& [name, error] : dispatcher_.repository().failures()) {
    v1::ModelLoadError* failure = response.add_failed();
    failure->set_name(name);
    failure->set_error(error);
  }
  *response_bytes = EncodeMessage(response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::GetModel(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* bytes,
                                                     grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetModelRequest request;
  if (auto status = DecodeRequest(*bytes, request); !status.ok()) {
    reactor->Finish(ToGrpc(status));
    return reactor;
  }
  ModelWorker* worker = dispatcher_.repository().Find(request.model());
  if (worker == nullptr) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     absl::StrCat("no model named \"", request.model().substr(0, 128), "\"")));
  } else {
    v1::ModelInfo response;
    Describe(*worker, response);
    *response_bytes = EncodeMessage(response);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* InferenceService::Unary(grpc::CallbackServerContext* context,
                                                  const char* method, TaskKind kind,
                                                  const grpc::ByteBuffer& bytes,
                                                  grpc::ByteBuffer* response,
                                                  Dispatcher::Validator<Request> validate,
                                                  Response Task::*result) const {
  Request request;
  const absl::Status decoded = DecodeRequest(bytes, request);
  auto* call = new UnaryCall(
      RpcScope(dispatcher_.metrics(), dispatcher_.ModelLabel(request.model()), method), response,
      [result](Task& task) { return EncodeMessage(task.*result); });
  dispatcher_.Start(context, method, kind, request, decoded, validate, call);
  return call;
}

grpc::ServerUnaryReactor* InferenceService::NextToken(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return Unary<v1::NextTokenRequest>(context, "NextToken", TaskKind::kNextToken, *request, response,
                                     ValidateNextToken, &Task::next_token);
}

grpc::ServerUnaryReactor* InferenceService::Score(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return Unary<v1::ScoreRequest>(context, "Score", TaskKind::kScore, *request, response,
                                 ValidateScore, &Task::score);
}

grpc::ServerUnaryReactor* InferenceService::Embed(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return Unary<v1::EmbedRequest>(context, "Embed", TaskKind::kEmbed, *request, response,
                                 ValidateEmbed, &Task::embed);
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* InferenceService::Direct(
    grpc::CallbackServerContext* context, const char* method, const grpc::ByteBuffer& bytes,
    grpc::ByteBuffer* response,
    absl::StatusOr<Response> (*answer)(const Request&, const ModelWorker&)) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Request request;
  const absl::Status decoded = DecodeRequest(bytes, request);
  RpcScope scope(dispatcher_.metrics(), dispatcher_.ModelLabel(request.model()), method);
  const absl::Status status = [&]() -> absl::Status {
    if (!decoded.ok()) return decoded;
    auto worker = dispatcher_.Route(request.model(), method);
    if (!worker.ok()) return worker.status();
    absl::StatusOr<Response> answered = answer(request, **worker);
    if (!answered.ok()) return answered.status();
    *response = EncodeMessage(*answered);
    return absl::OkStatus();
  }();
  reactor->Finish(scope.Finish(status));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return Direct<v1::TokenizeRequest, v1::TokenizeResponse>(context, "Tokenize", *request, response,
                                                           server::Tokenize);
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return Direct<v1::DetokenizeRequest, v1::DetokenizeResponse>(context, "Detokenize", *request,
                                                               response, server::Detokenize);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  v1::GenerateRequest request;
  const absl::Status decoded = DecodeRequest(*bytes, request);
  auto* call = new GenerateCall(
      RpcScope(dispatcher_.metrics(), dispatcher_.ModelLabel(request.model()), "Generate"));
  dispatcher_.Start(context, "Generate", TaskKind::kGenerate, request, decoded, ValidateGenerate,
                    call);
  return call;
}

}  // namespace attnserve::server
