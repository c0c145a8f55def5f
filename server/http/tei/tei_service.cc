#include "server/http/tei/tei_service.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/core/model_methods.h"
#include "server/frontend/request_validation.h"
#include "server/frontend/rerank.h"
#include "server/frontend/tokenization.h"
#include "server/http/http_unary_call.h"
#include "server/http/json_fields.h"
#include "server/http/openai/openai_requests.h"
#include "server/http/openai/openai_responses.h"
#include "server/ops/call_scope.h"

namespace attnserve::server {
namespace {

using json = nlohmann::ordered_json;
using Field = FieldPath::Field;
using Part = FieldPath::Part;

// TEI's error: {"error": ..., "error_type": ...}, with its status codes (422 for a request that
// does not validate, 413 for one too large, 429 when overloaded).
void RespondError(HttpResponder& responder, const absl::Status& status) {
  int http_status = HttpStatusOf(status);
  std::string type = "Backend";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      http_status = 422;
      type = "Validation";
      break;
    case absl::StatusCode::kResourceExhausted:
      type = "Validation";
      break;
    case absl::StatusCode::kUnavailable:
      type = IsShuttingDown(status) ? "Unhealthy" : "Overloaded";
      break;
    case absl::StatusCode::kNotFound:
      type = "Validation";
      break;
    case absl::StatusCode::kUnauthenticated:
      type = "Unauthorized";
      break;
    default:
      break;
  }
  responder.Respond(http_status, "application/json",
                    json({{"error", status.message()}, {"error_type", type}})
                        .dump(-1, ' ', false, json::error_handler_t::replace));
}

void RespondJson(HttpResponder& responder, const json& body) {
  responder.Respond(200, "application/json",
                    body.dump(-1, ' ', false, json::error_handler_t::replace));
}

// TEI's names for the core's fields: "inputs[2]", a pair's "inputs[2][1]", a rerank's "texts[2]".
class TeiFieldNames final : public FieldNames {
 public:
  std::string Name(const FieldPath& path) const override {
    if (const char* parameter = ParameterName(path.field)) return parameter;
    if (path.field == Field::kQuery) return "query";
    if (path.field == Field::kDocuments) {
      return path.row >= 0 ? absl::StrCat("texts[", path.row, "]") : "texts";
    }
    std::string name = path.row >= 0 ? absl::StrCat("inputs[", path.row, "]") : "inputs";
    if (path.part == Part::kPairText) absl::StrAppend(&name, "[1]");
    if (path.part == Part::kTokenIds && path.element >= 0) {
      absl::StrAppend(&name, "[", path.element, "]");
    }
    return name;
  }
};

// The model a request goes to: its "model" field, else the one model that answers `method`.
absl::StatusOr<std::string> ModelFor(const json& body, const Admission& admission,
                                     const std::string& method) {
  if (FindField(body, "model") != nullptr) return RequiredString(body, "model");
  std::vector<std::string> answering;
  for (const EngineLoop* worker : admission.repository().workers()) {
    const std::vector<std::string> methods = SupportedMethods(worker->model());
    if (std::find(methods.begin(), methods.end(), method) != methods.end()) {
      answering.push_back(worker->name());
    }
  }
  if (answering.size() == 1) return answering[0];
  if (answering.empty()) {
    return absl::NotFoundError(absl::StrCat("no model served here answers ", method));
  }
  return absl::InvalidArgumentError(absl::StrCat(answering.size(), " models answer ", method, " (",
                                                 absl::StrJoin(answering, ", "),
                                                 "): name one in the request's \"model\" field"));
}

// truncate (default false: refused when too long) and truncation_direction ("Right", "Left").
absl::StatusOr<TextTruncation> ReadTruncation(const json& body) {
  TextTruncation truncation;
  ASSIGN_OR_RETURN(truncation.enabled, Bool(body, "truncate", false));
  if (const json* direction = FindField(body, "truncation_direction"); direction != nullptr) {
    const std::string side =
        direction->is_string() ? absl::AsciiStrToLower(direction->get<std::string>()) : "";
    if (side != "left" && side != "right") {
      return InvalidField("truncation_direction", "must be \"Right\" or \"Left\"");
    }
    truncation.from_left = side == "left";
  }
  return truncation;
}

// A text or a pair of texts (a list of two strings).
std::optional<ClassifyInput::Item> PredictItem(const json& value) {
  if (value.is_string()) return ClassifyInput::Item{SequenceInput::Text(value.get<std::string>())};
  if (value.is_array() && value.size() == 2 && value[0].is_string() && value[1].is_string()) {
    return ClassifyInput::Item{SequenceInput::Text(value[0].get<std::string>()),
                               value[1].get<std::string>()};
  }
  return std::nullopt;
}

// /predict's inputs, as TEI reads them: a text, a pair ["a", "b"], or a list of texts and
// pairs; whether it was one (answered with one list of labels) or a batch.
absl::StatusOr<std::pair<ClassifyInput, bool>> PredictInputs(const json& body) {
  const json* inputs = FindField(body, "inputs");
  if (inputs == nullptr) return InvalidField("inputs", "is missing");
  ClassifyInput input;
  if (auto one = PredictItem(*inputs)) {
    input.items.push_back(*std::move(one));
    return std::make_pair(std::move(input), true);
  }
  if (!inputs->is_array()) {
    return InvalidField("inputs", "must be a text, a pair of texts, or a list of them");
  }
  if (inputs->size() > kMaxClassifyItems) {
    return InvalidField(
        "inputs", absl::StrCat("has ", inputs->size(), " entries; at most ", kMaxClassifyItems));
  }
  for (size_t i = 0; i < inputs->size(); ++i) {
    auto item = PredictItem((*inputs)[i]);
    if (!item) {
      return InvalidField(absl::StrCat("inputs[", i, "]"),
                          "must be a text or a pair of texts [\"a\", \"b\"]");
    }
    input.items.push_back(*std::move(item));
  }
  return std::make_pair(std::move(input), false);
}

// One input's labels by descending score, as TEI lists them.
json Predictions(const std::vector<float>& scores, const std::vector<std::string>* labels) {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  json list = json::array();
  for (size_t i : order) {
    list.push_back(
        {{"score", scores[i]},
         {"label",
          labels != nullptr && i < labels->size() ? (*labels)[i] : absl::StrCat("LABEL_", i)}});
  }
  return list;
}

// /embed's answer, [[...], ...], written by hand: a float's shortest form, no tree of numbers.
std::string EmbeddingsArray(const std::vector<Embedding>& embeddings) {
  std::string body = "[";
  char number[32];
  for (size_t i = 0; i < embeddings.size(); ++i) {
    body += i > 0 ? ",[" : "[";
    const std::vector<float>& values = embeddings[i].values;
    for (size_t j = 0; j < values.size(); ++j) {
      if (j > 0) body += ',';
      const float value = std::isfinite(values[j]) ? values[j] : 0.0f;
      body.append(number, std::to_chars(number, number + sizeof(number), value).ptr);
    }
    body += ']';
  }
  return body + "]";
}

// The body, parsed, and the model it goes to.
struct Read {
  json body;
  std::string model;
};

absl::StatusOr<Read> ReadRequest(const HttpRequest& request, const Admission& admission,
                                 const std::string& method) {
  ASSIGN_OR_RETURN(json body, ParseJsonBody(request.body));
  ASSIGN_OR_RETURN(std::string model, ModelFor(body, admission, method));
  return Read{std::move(body), std::move(model)};
}

}  // namespace

HttpApi::Match TeiService::Matches(const HttpRequest& request) const {
  const std::string& path = request.target;
  if (path == "/info") return request.method == "GET" ? Match::kYes : Match::kWrongMethod;
  if (path == "/embed" || path == "/rerank" || path == "/predict") {
    return request.method == "POST" ? Match::kYes : Match::kWrongMethod;
  }
  // vLLM's /tokenize takes a "prompt" or "messages"; TEI's takes "inputs".
  if (path == "/tokenize" && request.method == "POST") {
    const json body = json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_object() && body.contains("inputs")) return Match::kYes;
  }
  return Match::kNo;
}

void TeiService::Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  const std::string& path = request.target;
  if (path == "/embed") return Embed(request, std::move(responder));
  if (path == "/rerank") return Rerank(request, std::move(responder));
  if (path == "/predict") return Predict(request, std::move(responder));
  if (path == "/tokenize") return Tokenize(request, *responder);
  Info(*responder);
}

void TeiService::Embed(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) const {
  absl::StatusOr<Read> read = ReadRequest(request, admission_, "Embed");
  const std::string model = read.ok() ? read->model : "";
  EmbedInput input;
  const absl::Status prepared = [&]() -> absl::Status {
    RETURN_IF_ERROR(read.status());
    ASSIGN_OR_RETURN(input.sequences, Sequences(read->body, "inputs", kMaxSequences));
    ASSIGN_OR_RETURN(input.normalize, Bool(read->body, "normalize", true));
    ASSIGN_OR_RETURN(input.dimensions, Int(read->body, "dimensions", 0, 1, 1 << 20));
    ASSIGN_OR_RETURN(input.truncation, ReadTruncation(read->body));
    if (FindField(read->body, "prompt_name") != nullptr) {
      ASSIGN_OR_RETURN(input.prompt_name, RequiredString(read->body, "prompt_name"));
    }
    return absl::OkStatus();
  }();
  StartHttpUnary(
      admission_, request, std::move(responder), "tei.embed", prepared, model, "Embed",
      TaskKind::kEmbed,
      [&](const EngineLoop& worker, Task& task) {
        return ValidateEmbed(input, TeiFieldNames(), worker, task);
      },
      [](Task& task) { return EmbeddingsArray(task.embed().embeddings); }, RespondError);
}

void TeiService::Rerank(const HttpRequest& request,
                        std::shared_ptr<HttpResponder> responder) const {
  absl::StatusOr<Read> read = ReadRequest(request, admission_, "Rerank");
  const std::string model = read.ok() ? read->model : "";
  auto input = std::make_shared<RerankInput>();
  bool return_text = false;
  const absl::Status prepared = [&]() -> absl::Status {
    RETURN_IF_ERROR(read.status());
    ASSIGN_OR_RETURN(input->query, RequiredString(read->body, "query"));
    ASSIGN_OR_RETURN(input->documents, Strings(read->body, "texts", kMaxClassifyItems));
    ASSIGN_OR_RETURN(input->raw_scores, Bool(read->body, "raw_scores", false));
    ASSIGN_OR_RETURN(return_text, Bool(read->body, "return_text", false));
    ASSIGN_OR_RETURN(const TextTruncation truncation, ReadTruncation(read->body));
    input->truncate = truncation.enabled;
    input->truncate_from_left = truncation.from_left;
    // JSON may escape a byte as six ("\u0001"); the answer's bound is scaled by four.
    input->echo_scale = return_text ? 2 : 0;
    return absl::OkStatus();
  }();
  StartHttpUnary(
      admission_, request, std::move(responder), "tei.rerank", prepared, model, "Rerank",
      TaskKind::kClassify,
      [&](const EngineLoop& worker, Task& task) {
        return ValidateRerank(*input, TeiFieldNames(), worker, task);
      },
      [input, return_text](Task& task) {
        json results = json::array();
        for (const RankedDocument& ranked : Rank(task.classify().scores, 0)) {
          json result = {{"index", ranked.index}, {"score", ranked.score}};
          if (return_text) result["text"] = input->documents[ranked.index];
          results.push_back(std::move(result));
        }
        return results.dump(-1, ' ', false, json::error_handler_t::replace);
      },
      RespondError);
}

void TeiService::Predict(const HttpRequest& request,
                         std::shared_ptr<HttpResponder> responder) const {
  absl::StatusOr<Read> read = ReadRequest(request, admission_, "Classify");
  const std::string model = read.ok() ? read->model : "";
  ClassifyInput input;
  bool single = false;
  const absl::Status prepared = [&]() -> absl::Status {
    RETURN_IF_ERROR(read.status());
    ASSIGN_OR_RETURN(std::tie(input, single), PredictInputs(read->body));
    ASSIGN_OR_RETURN(input.raw_scores, Bool(read->body, "raw_scores", false));
    ASSIGN_OR_RETURN(input.truncation, ReadTruncation(read->body));
    return absl::OkStatus();
  }();
  StartHttpUnary(
      admission_, request, std::move(responder), "tei.predict", prepared, model, "Classify",
      TaskKind::kClassify,
      [&](const EngineLoop& worker, Task& task) {
        return ValidateClassify(input, TeiFieldNames(), worker, task);
      },
      [single](Task& task) {
        const ClassifyJob& job = task.classify();
        json answer = json::array();
        for (const std::vector<float>& scores : job.scores) {
          answer.push_back(Predictions(scores, job.labels));
        }
        return (single ? answer[0] : answer).dump(-1, ' ', false, json::error_handler_t::replace);
      },
      RespondError);
}

void TeiService::Tokenize(const HttpRequest& request, HttpResponder& responder) const {
  absl::StatusOr<Read> read = ReadRequest(request, admission_, "Tokenize");
  CallScope scope(admission_.metrics(), admission_.ModelLabel(read.ok() ? read->model : ""),
                  "tei.tokenize");
  auto answer = [&]() -> absl::StatusOr<json> {
    RETURN_IF_ERROR(read.status());
    ASSIGN_OR_RETURN(auto texts, Strings(read->body, "inputs", kMaxSequences));
    ASSIGN_OR_RETURN(const bool special, Bool(read->body, "add_special_tokens", true));
    std::string prompt_name;
    if (FindField(read->body, "prompt_name") != nullptr) {
      ASSIGN_OR_RETURN(prompt_name, RequiredString(read->body, "prompt_name"));
    }
    ASSIGN_OR_RETURN(EngineLoop * worker, admission_.Route(read->model, "Tokenize"));
    const ModelConfig& config = worker->model().config;
    if (prompt_name.empty()) prompt_name = config.default_prompt_name;
    const auto prompt = config.prompts.find(prompt_name);
    if (!prompt_name.empty() && prompt == config.prompts.end()) {
      return InvalidField("prompt_name", absl::StrCat("\"", prompt_name.substr(0, 128),
                                                      "\" is not a prompt of ", read->model));
    }
    json answer = json::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      TokenizeInput input{.text = prompt_name.empty() ? texts[i] : prompt->second + texts[i],
                          .omit_special_tokens = !special};
      ASSIGN_OR_RETURN(auto tokens,
                       server::Tokenize(input, OpenAiFieldNames("inputs", i), *worker));
      json list = json::array();
      for (const TokenSpan& token : tokens) {
        list.push_back({{"id", token.id},
                        {"text", token.text},
                        {"special", token.special},
                        {"start", token.start},
                        {"stop", token.end}});
      }
      answer.push_back(std::move(list));
    }
    return answer;
  }();
  scope.Finish(answer.status());
  if (!answer.ok()) return RespondError(responder, answer.status());
  RespondJson(responder, *answer);
}

void TeiService::Info(HttpResponder& responder) const {
  // The model TEI's clients ask about: the one that classifies, else the one that embeds.
  const json none = json::object();
  absl::StatusOr<std::string> model = ModelFor(none, admission_, "Classify");
  if (!model.ok()) model = ModelFor(none, admission_, "Embed");
  if (!model.ok()) return RespondError(responder, model.status());
  absl::StatusOr<EngineLoop*> worker = admission_.Route(*model, "Tokenize");
  if (!worker.ok()) return RespondError(responder, worker.status());
  const ModelConfig& config = (*worker)->model().config;
  json model_type;
  if (!config.classifier.labels.empty()) {
    json id2label = json::object(), label2id = json::object();
    for (size_t i = 0; i < config.classifier.labels.size(); ++i) {
      id2label[std::to_string(i)] = config.classifier.labels[i];
      label2id[config.classifier.labels[i]] = i;
    }
    model_type[config.classifier.num_labels == 1 ? "reranker" : "classifier"] = {
        {"id2label", std::move(id2label)}, {"label2id", std::move(label2id)}};
  } else {
    model_type["embedding"] = {{"pooling", config.pooling == Pooling::kFirst  ? "cls"
                                           : config.pooling == Pooling::kLast ? "last_token"
                                                                              : "mean"}};
  }
  const EngineLoopOptions& options = (*worker)->options();
  RespondJson(responder, {{"model_id", *model},
                          {"model_sha", nullptr},
                          {"model_dtype", WeightFormatName(config.weights)},
                          {"model_type", std::move(model_type)},
                          {"max_concurrent_requests", options.max_queue_size},
                          {"max_input_length", (*worker)->max_context()},
                          {"max_batch_tokens", options.max_batch_tokens},
                          {"max_batch_requests", options.max_batch_size},
                          {"max_client_batch_size", kMaxSequences},
                          {"tokenization_workers", 1},
                          {"version", "attnserve"}});
}

}  // namespace attnserve::server
