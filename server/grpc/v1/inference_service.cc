#include "server/grpc/v1/inference_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/frontend/request_validation.h"
#include "server/frontend/rerank.h"
#include "server/frontend/tokenization.h"
#include "server/grpc/v1/v1_messages.h"
#include "server/grpc/wire_format.h"
#include "server/ops/call_scope.h"

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

void Describe(const EngineLoop& worker, v1::ModelInfo& info) {
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
  info.set_weights(WeightFormatName(c.weights));
  if (c.weights.quantized && c.weights.bits == 8) info.set_int8_group_size(c.weights.group_size);
  info.set_weights_as_stored(worker.model().weights_as_stored);
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
  for (const std::string& label : c.classifier.labels) info.add_labels(label);
}

}  // namespace

template <typename Request>
absl::Status InferenceService::Authenticated(const grpc::CallbackServerContext& context,
                                             const grpc::ByteBuffer& bytes,
                                             Request& request) const {
  RETURN_IF_ERROR(OriginOf(context, admission_).status());
  return DecodeRequest(bytes, request);
}

grpc::ServerUnaryReactor* InferenceService::ListModels(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* bytes,
                                                       grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ListModelsRequest request;
  if (auto status = Authenticated(*context, *bytes, request); !status.ok()) {
    reactor->Finish(ToGrpc(status));
    return reactor;
  }
  v1::ListModelsResponse response;
  for (const EngineLoop* worker : admission_.repository().workers())
    Describe(*worker, *response.add_models());
  for (const auto& [name, error] : admission_.repository().failures()) {
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
  if (auto status = Authenticated(*context, *bytes, request); !status.ok()) {
    reactor->Finish(ToGrpc(status));
    return reactor;
  }
  EngineLoop* worker = admission_.repository().Find(request.model());
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

template <typename Request, typename Input>
grpc::ServerUnaryReactor* InferenceService::Unary(
    grpc::CallbackServerContext* context, const char* method, TaskKind kind,
    const grpc::ByteBuffer& bytes, grpc::ByteBuffer* response,
    absl::Status (*validate)(const Input&, const FieldNames&, const EngineLoop&, Task&),
    grpc::ByteBuffer (*encode)(const std::string& model, Task& task)) const {
  Request request;
  absl::Status prepared = DecodeRequest(bytes, request);
  absl::StatusOr<Input> input = absl::UnknownError("not read");
  if (prepared.ok()) {
    input = ReadInput(request);
    prepared = input.status();
  }
  auto* call = new UnaryCall(
      CallScope(admission_.metrics(), admission_.ModelLabel(request.model()), method), response,
      [model = request.model(), encode](Task& task) { return encode(model, task); },
      admission_.answers());
  admission_.Start(
      OriginOf(*context, admission_), request.model(), method, kind, prepared,
      [&](const EngineLoop& worker, Task& task) {
        return validate(*input, V1FieldNames(), worker, task);
      },
      call);
  return call;
}

grpc::ServerUnaryReactor* InferenceService::NextToken(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return Unary<v1::NextTokenRequest, NextTokenInput>(
      context, "NextToken", TaskKind::kNextToken, *request, response, ValidateNextToken,
      [](const std::string& model, Task& task) {
        v1::NextTokenResponse message = NextTokenMessage(task.next_token().rows);
        message.set_model(model);
        return EncodeMessage(message);
      });
}

grpc::ServerUnaryReactor* InferenceService::Score(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return Unary<v1::ScoreRequest, ScoreInput>(
      context, "Score", TaskKind::kScore, *request, response, ValidateScore,
      [](const std::string& model, Task& task) {
        v1::ScoreResponse message = ScoreMessage(task.score().result);
        message.set_model(model);
        return EncodeMessage(message);
      });
}

grpc::ServerUnaryReactor* InferenceService::Embed(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return Unary<v1::EmbedRequest, EmbedInput>(
      context, "Embed", TaskKind::kEmbed, *request, response, ValidateEmbed,
      [](const std::string& model, Task& task) {
        v1::EmbedResponse message = EmbedMessage(task.embed().embeddings);
        message.set_model(model);
        return EncodeMessage(message);
      });
}

grpc::ServerUnaryReactor* InferenceService::Classify(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return Unary<v1::ClassifyRequest, ClassifyInput>(
      context, "Classify", TaskKind::kClassify, *request, response, ValidateClassify,
      [](const std::string& model, Task& task) {
        v1::ClassifyResponse message = ClassifyMessage(task.classify());
        message.set_model(model);
        return EncodeMessage(message);
      });
}

grpc::ServerUnaryReactor* InferenceService::Rerank(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* bytes,
                                                   grpc::ByteBuffer* response) {
  // The answer repeats the request's documents: the call keeps the request.
  auto request = std::make_shared<v1::RerankRequest>();
  absl::Status prepared = DecodeRequest(*bytes, *request);
  absl::StatusOr<RerankInput> input = absl::UnknownError("not read");
  if (prepared.ok()) {
    input = ReadInput(*request);
    prepared = input.status();
  }
  auto* call = new UnaryCall(
      CallScope(admission_.metrics(), admission_.ModelLabel(request->model()), "Rerank"), response,
      [request](Task& task) {
        v1::RerankResponse message = RerankMessage(task.classify(), *request);
        message.set_model(request->model());
        return EncodeMessage(message);
      },
      admission_.answers());
  admission_.Start(
      OriginOf(*context, admission_), request->model(), "Rerank", TaskKind::kClassify, prepared,
      [&](const EngineLoop& worker, Task& task) {
        return ValidateRerank(*input, V1FieldNames(), worker, task);
      },
      call);
  return call;
}

template <typename Request, typename Input, typename Answer>
grpc::ServerUnaryReactor* InferenceService::Direct(grpc::CallbackServerContext* context,
                                                   const char* method,
                                                   const grpc::ByteBuffer& bytes,
                                                   grpc::ByteBuffer* response, Answer answer) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Request request;
  const absl::Status decoded = Authenticated(*context, bytes, request);
  CallScope scope(admission_.metrics(), admission_.ModelLabel(request.model()), method);
  const absl::Status status = [&]() -> absl::Status {
    RETURN_IF_ERROR(decoded);
    ASSIGN_OR_RETURN(auto input, ReadInput(request));
    ASSIGN_OR_RETURN(auto worker, admission_.Route(request.model(), method));
    ASSIGN_OR_RETURN(auto answered, answer(input, V1FieldNames(), *worker));
    *response = EncodeMessage(answered);
    return absl::OkStatus();
  }();
  scope.Finish(status);
  reactor->Finish(ToGrpc(status));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return Direct<v1::TokenizeRequest, TokenizeInput>(
      context, "Tokenize", *request, response,
      [](const TokenizeInput& input, const FieldNames& names,
         const EngineLoop& worker) -> absl::StatusOr<v1::TokenizeResponse> {
        ASSIGN_OR_RETURN(auto tokens, server::Tokenize(input, names, worker));
        return TokenizeMessage(tokens);
      });
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return Direct<v1::DetokenizeRequest, DetokenizeInput>(
      context, "Detokenize", *request, response,
      [](const DetokenizeInput& input, const FieldNames& names,
         const EngineLoop& worker) -> absl::StatusOr<v1::DetokenizeResponse> {
        ASSIGN_OR_RETURN(auto text, server::Detokenize(input, names, worker));
        v1::DetokenizeResponse message;
        message.set_text(std::move(text));
        return message;
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  v1::GenerateRequest request;
  absl::Status prepared = DecodeRequest(*bytes, request);
  absl::StatusOr<GenerateInput> input = absl::UnknownError("not read");
  if (prepared.ok()) {
    input = ReadInput(request);
    prepared = input.status();
  }
  auto* call = new GenerateCall(
      CallScope(admission_.metrics(), admission_.ModelLabel(request.model()), "Generate"),
      [](const GenerationEvent& event) { return EncodeMessage(GenerateMessage(event)); });
  admission_.Start(
      OriginOf(*context, admission_), request.model(), "Generate", TaskKind::kGenerate, prepared,
      [&](const EngineLoop& worker, Task& task) {
        return ValidateGenerate(*input, V1FieldNames(), worker, task);
      },
      call);
  return call;
}

}  // namespace attnserve::server
