#include "server/inference_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace attnserve::server {
namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

const char* StatusName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  return index >= 0 && index < 17 ? kNames[index] : "UNKNOWN";
}

// Counts an RPC in flight while it lives, then records its latency and status code.
class RpcScope {
 public:
  // `model` is the label: a served model's name, never a caller's arbitrary string (which would
  // let any client create unbounded metric series).
  RpcScope(ServerMetrics& metrics, std::string model, std::string method)
      : metrics_(metrics),
        model_(std::move(model)),
        method_(std::move(method)),
        in_flight_(metrics.in_flight.Add({{"model", model_}})) {
    in_flight_.Increment();
  }
  grpc::Status Finish(const absl::Status& status) {
    const grpc::Status result = ToGrpc(status);
    in_flight_.Decrement();
    metrics_.requests
        .Add({{"model", model_}, {"method", method_}, {"code", StatusName(result.error_code())}})
        .Increment();
    metrics_.latency.Add({{"model", model_}, {"method", method_}})
        .Observe(absl::ToDoubleSeconds(absl::Now() - start_));
    return result;
  }

 private:
  ServerMetrics& metrics_;
  const std::string model_, method_;
  metrics::Gauge& in_flight_;
  const absl::Time start_ = absl::Now();
};

std::string PositionName(PositionKind kind) {
  switch (kind) {
    case PositionKind::kSinusoidal:
      return "sinusoidal";
    case PositionKind::kLearned:
      return "learned";
    case PositionKind::kAlibi:
      return "alibi";
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
  info.set_attention(c.attention == AttentionKind::kSoftmax     ? "softmax"
                     : c.attention == AttentionKind::kExclusive ? "exclusive"
                                                                : "linear");
  info.set_positions(PositionName(c.positions));
  info.set_norm(c.norm == NormKind::kLayerNorm ? "layer_norm"
                : c.norm == NormKind::kRmsNorm ? "rms_norm"
                                               : "scale_norm");
  if (!c.tokenizer.type.empty()) {
    info.mutable_tokenizer()->set_type(c.tokenizer.type);
    for (const auto& [text, id] : c.tokenizer.special_tokens) {
      (*info.mutable_tokenizer()->mutable_special_tokens())[text] = id;
    }
  }
  for (const std::string& method : SupportedMethods(worker.model())) info.add_methods(method);
}

}  // namespace

std::string InferenceService::ModelLabel(const std::string& model) const {
  return repository_.Find(model) != nullptr ? model : "_unknown";
}

absl::StatusOr<ModelWorker*> InferenceService::Route(const std::string& model,
                                                     const std::string& method) const {
  if (model.empty()) return absl::InvalidArgumentError("model is empty");
  ModelWorker* worker = repository_.Find(model);
  if (worker == nullptr) {
    return absl::NotFoundError(absl::StrCat("no model named \"", model.substr(0, 128),
                                            "\"; ListModels shows what is served"));
  }
  const std::vector<std::string> methods = SupportedMethods(worker->model());
  if (std::find(methods.begin(), methods.end(), method) == methods.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", model, " (", worker->model().config.architecture, ") does not answer ", method,
        "; it answers ", methods.empty() ? "nothing yet" : absl::StrJoin(methods, ", ")));
  }
  return worker;
}

absl::Status InferenceService::Run(grpc::ServerContext* context, ModelWorker& worker,
                                   const std::shared_ptr<Task>& task,
                                   grpc::ServerWriter<v1::GenerateResponse>* writer) const {
  task->deadline = absl::FromChrono(context->deadline());
  if (auto status = worker.Submit(task); !status.ok()) return status;
  while (true) {
    std::deque<v1::GenerateResponse> events;
    bool done = false;
    absl::Status status;
    {
      absl::MutexLock lock(&task->mutex);
      auto ready = [&task]() ABSL_SHARED_LOCKS_REQUIRED(task->mutex) {
        return task->done || !task->events.empty();
      };
      task->mutex.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(20));
      events.swap(task->events);
      done = task->done;
      status = task->status;
    }
    for (const auto& event : events) {
      if (writer != nullptr && !writer->Write(event)) {
        task->cancelled = true;  // the client went away: free its sequence at the next step
        return absl::CancelledError("the client stopped reading the stream");
      }
    }
    if (done) return status;
    if (context->IsCancelled()) {
      task->cancelled = true;
      return absl::CancelledError("the caller cancelled the request");
    }
  }
}

grpc::Status InferenceService::ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                                          v1::ListModelsResponse* response) {
  for (const ModelWorker* worker : repository_.workers())
    Describe(*worker, *response->add_models());
  for (const auto& [name, error] : repository_.failures()) {
    v1::ModelLoadError* failure = response->add_failed();
    failure->set_name(name);
    failure->set_error(error);
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetModel(grpc::ServerContext*, const v1::GetModelRequest* request,
                                        v1::ModelInfo* response) {
  ModelWorker* worker = repository_.Find(request->model());
  if (worker == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no model named \"", request->model().substr(0, 128), "\""));
  }
  Describe(*worker, *response);
  return grpc::Status::OK;
}

template <typename Request, typename Response>
grpc::Status InferenceService::Unary(grpc::ServerContext* context, const char* method,
                                     TaskKind kind, const Request& request, Response* response,
                                     Validator<Request> validate, Response Task::*result) const {
  RpcScope scope(metrics_, ModelLabel(request.model()), method);
  auto worker = Route(request.model(), method);
  if (!worker.ok()) return scope.Finish(worker.status());
  auto task = std::make_shared<Task>(kind);
  if (auto status = validate(request, **worker, *task); !status.ok()) {
    return scope.Finish(status);
  }
  absl::Status status = Run(context, **worker, task);
  if (status.ok()) {
    absl::MutexLock lock(&task->mutex);
    *response = std::move((*task).*result);
  }
  return scope.Finish(status);
}

grpc::Status InferenceService::NextToken(grpc::ServerContext* context,
                                         const v1::NextTokenRequest* request,
                                         v1::NextTokenResponse* response) {
  return Unary(context, "NextToken", TaskKind::kNextToken, *request, response, ValidateNextToken,
               &Task::next_token);
}

grpc::Status InferenceService::Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                                     v1::ScoreResponse* response) {
  return Unary(context, "Score", TaskKind::kScore, *request, response, ValidateScore, &Task::score);
}

grpc::Status InferenceService::Embed(grpc::ServerContext* context, const v1::EmbedRequest* request,
                                     v1::EmbedResponse* response) {
  return Unary(context, "Embed", TaskKind::kEmbed, *request, response, ValidateEmbed, &Task::embed);
}

grpc::Status InferenceService::Generate(grpc::ServerContext* context,
                                        const v1::GenerateRequest* request,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  RpcScope scope(metrics_, ModelLabel(request->model()), "Generate");
  auto worker = Route(request->model(), "Generate");
  if (!worker.ok()) return scope.Finish(worker.status());
  auto task = std::make_shared<Task>(TaskKind::kGenerate);
  if (auto status = ValidateGenerate(*request, **worker, *task); !status.ok()) {
    return scope.Finish(status);
  }
  return scope.Finish(Run(context, **worker, task, writer));
}

}  // namespace attnserve::server
