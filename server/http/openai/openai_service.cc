#include "server/http/openai/openai_service.h"

#include <nlohmann/json.hpp>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/core/request_cost.h"
#include "server/frontend/request_validation.h"
#include "server/frontend/rerank.h"
#include "server/frontend/tokenization.h"
#include "server/http/http_unary_call.h"
#include "server/http/openai/chat_prompt.h"
#include "server/http/openai/openai_generation.h"
#include "server/http/openai/openai_requests.h"
#include "server/http/openai/openai_responses.h"
#include "server/ops/call_scope.h"

namespace attnserve::server {
namespace {

using json = nlohmann::json;

void RespondError(HttpResponder& responder, const absl::Status& status) {
  responder.Respond(HttpStatusOf(status), "application/json", ErrorBody(status));
}

void RespondJson(HttpResponder& responder, const json& body) {
  responder.Respond(200, "application/json",
                    body.dump(-1, ' ', false, json::error_handler_t::replace));
}

std::string NewId(std::string_view prefix) {
  static absl::BitGen* const bits = new absl::BitGen();  // absl::BitGen is thread-compatible
  static std::mutex* const mutex = new std::mutex();
  std::lock_guard lock(*mutex);
  return absl::StrFormat("%s-%016x%016x", prefix, absl::Uniform<uint64_t>(*bits),
                         absl::Uniform<uint64_t>(*bits));
}

// The body, read as one endpoint's request.
template <typename Request>
absl::StatusOr<Request> ReadBody(const HttpRequest& request,
                                 absl::StatusOr<Request> (*read)(const nlohmann::ordered_json&)) {
  ASSIGN_OR_RETURN(auto body, ParseJsonBody(request.body));
  return read(body);
}

}  // namespace

HttpApi::Match OpenAiService::Matches(const HttpRequest& request) const {
  static const auto* const kPaths = new std::map<std::string, std::string>{
      {"/v1/models", "GET"},      {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
      {"/v1/embeddings", "POST"}, {"/v1/rerank", "POST"},      {"/v2/rerank", "POST"},
      {"/v1/score", "POST"},      {"/tokenize", "POST"},       {"/detokenize", "POST"}};
  const auto path = kPaths->find(request.target);
  if (path == kPaths->end()) return Match::kNo;
  return path->second == request.method ? Match::kYes : Match::kWrongMethod;
}

void OpenAiService::Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  const std::string& path = request.target;
  if (path == "/v1/models") return Models(*responder);
  if (path == "/v1/completions") return Completions(request, std::move(responder));
  if (path == "/v1/chat/completions") return Chat(request, std::move(responder));
  if (path == "/v1/embeddings") return Embeddings(request, std::move(responder));
  if (path == "/v1/rerank" || path == "/v2/rerank") return Rerank(request, std::move(responder));
  if (path == "/v1/score") return Score(request, std::move(responder));
  if (path == "/tokenize") return Tokenize(request, *responder);
  Detokenize(request, *responder);
}

void OpenAiService::Models(HttpResponder& responder) const {
  json data = json::array();
  for (const EngineLoop* worker : admission_.repository().workers()) {
    data.push_back({{"id", worker->name()},
                    {"object", "model"},
                    {"created", absl::ToUnixSeconds(started_)},
                    {"owned_by", "attnserve"},
                    {"max_model_len", worker->max_context()}});
  }
  RespondJson(responder, {{"object", "list"}, {"data", std::move(data)}});
}

namespace {

// What completions and chat completions hand the core: one Generate task per prompt and choice.
struct GenerationPlan {
  GenerationJob::Api api;
  std::string model;
  std::vector<SequenceInput> prompts;
  OpenAiSampling sampling;
  bool logprobs = false;
  std::vector<std::string> echoes;            // completions' echo: each prompt's text
  std::string list_name;                      // "prompt" or "messages", for errors
  std::optional<GenerationJob::Tools> tools;  // chat with tools
};

// Choice c's Generate: its prompt's, with its own seed (choices of one prompt differ).
GenerateInput ChoiceInput(const GenerationPlan& plan, int64_t choice) {
  GenerateInput input = plan.sampling.generate;
  input.prompt = plan.prompts[choice / plan.sampling.n];
  if (input.seed) input.seed = *input.seed + static_cast<uint64_t>(choice % plan.sampling.n);
  return input;
}

OpenAiFieldNames ChoiceFieldNames(const GenerationPlan& plan, int64_t choice) {
  return OpenAiFieldNames(plan.list_name, plan.prompts.size() > 1 ? choice / plan.sampling.n : -1);
}

absl::Status ValidateChoice(const GenerationPlan& plan, const OpenAiFieldNames& names,
                            const EngineLoop& loop, GenerateInput& input, Task& task) {
  task.generate().collect_events = !plan.sampling.stream;
  task.answer_scale = 4;
  if (input.max_tokens == 0) input.max_tokens = loop.max_context();  // unbounded
  return ValidateGenerate(input, names, loop, task);
}

// Every choice's answer is held until the response is done, so together they must fit the
// model's answer budget, or the request could never be served: refused at once (413), before
// any choice queues (where a full queue would answer a retryable 429 instead). A prompt that
// does not validate is left to its choice, which says why.
absl::Status CheckChoicesFit(const GenerationPlan& plan, const EngineLoop& loop) {
  int64_t bytes = 0;
  for (size_t prompt = 0; prompt < plan.prompts.size(); ++prompt) {
    const int64_t choice = static_cast<int64_t>(prompt) * plan.sampling.n;
    GenerateInput input = ChoiceInput(plan, choice);
    Task probe(TaskKind::kGenerate, nullptr);
    if (!ValidateChoice(plan, ChoiceFieldNames(plan, choice), loop, input, probe).ok()) {
      return absl::OkStatus();
    }
    bytes += CostOf(probe, loop.model()).response_bytes * plan.sampling.n;
  }
  const int64_t budget = loop.options().budget.response_bytes;
  if (bytes <= budget) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the answers of the ", plan.sampling.n * static_cast<int64_t>(plan.prompts.size()),
      " choices would take up to ", bytes >> 20, " MiB together; model ", plan.model,
      " holds at most ", budget >> 20, " MiB of answers: ask for fewer choices or tokens"));
}

// How a chat answer's tool calls are read: a named tool_choice's answer is its arguments, a
// required call's a constrained JSON list, else the model's format (serving.json's
// tool_call_format, or what its chat template shows).
GenerationJob::Tools ToolsOf(const EngineLoop& worker, const ChatRequest& chat) {
  if (chat.tools.choice == ToolRequest::Choice::kFunction) {
    return {.format = tool_calls::Format::kGeneric, .function = chat.tools.function};
  }
  if (chat.tools.choice == ToolRequest::Choice::kRequired) {
    return {.format = tool_calls::Format::kJsonList, .function = ""};
  }
  if (auto named = tool_calls::FormatNamed(worker.options().tool_call_format)) {
    return {.format = *named, .function = ""};
  }
  absl::StatusOr<const ChatTemplate*> chat_template = ChatTemplateFor(worker, chat);
  return {.format = chat_template.ok() ? tool_calls::DetectFormat((*chat_template)->source())
                                       : tool_calls::Format::kGeneric,
          .function = ""};
}

void StartGeneration(const Admission& admission, const HttpRequest& request,
                     std::shared_ptr<HttpResponder> responder, EngineLoop& worker,
                     GenerationPlan plan, CallScope scope) {
  if (absl::Status fits = CheckChoicesFit(plan, worker); !fits.ok()) {
    scope.Finish(fits);
    return RespondError(*responder, fits);
  }
  const int64_t n = plan.sampling.n;
  const int64_t choices = n * static_cast<int64_t>(plan.prompts.size());
  GenerationJob::Options options{
      .api = plan.api,
      .header = {.id = NewId(plan.api == GenerationJob::Api::kChat ? "chatcmpl" : "cmpl"),
                 .created = absl::ToUnixSeconds(absl::Now()),
                 .model = plan.model},
      .stream = plan.sampling.stream,
      .include_usage = plan.sampling.include_usage,
      .logprobs = plan.logprobs,
      .choices = choices,
      .n = n,
      .stop = plan.sampling.generate.stop,
      .tools = plan.tools};
  auto job = std::make_shared<GenerationJob>(std::move(options), *worker.model().tokenizer,
                                             responder, std::move(scope));
  std::weak_ptr<GenerationJob> weak = job;
  responder->OnGone([weak] {
    if (auto held = weak.lock()) held->Cancel();
  });
  responder->OnWritten([weak] {
    if (auto held = weak.lock()) held->Resume();
  });
  const CallOrigin origin = HttpOrigin(request);
  int64_t handed = 0;
  for (; handed < choices && !job->failed(); ++handed) {
    if (!plan.echoes.empty()) job->Echo(handed, plan.echoes[handed / n]);
    GenerateInput input = ChoiceInput(plan, handed);
    const OpenAiFieldNames names = ChoiceFieldNames(plan, handed);
    admission.Start(
        origin, plan.model, "Generate", TaskKind::kGenerate, absl::OkStatus(),
        [&](const EngineLoop& loop, Task& task) {
          return ValidateChoice(plan, names, loop, input, task);
        },
        job->choice(handed));
  }
  job->Started(handed);
}

}  // namespace

void OpenAiService::Completions(const HttpRequest& request,
                                std::shared_ptr<HttpResponder> responder) const {
  absl::StatusOr<CompletionRequest> read = ReadBody(request, ReadCompletionRequest);
  CallScope scope(admission_.metrics(), admission_.ModelLabel(read.ok() ? read->model : ""),
                  "openai.completions");
  if (!read.ok()) {
    scope.Finish(read.status());
    return RespondError(*responder, read.status());
  }
  auto worker = admission_.Route(read->model, "Generate");
  if (!worker.ok()) {
    scope.Finish(worker.status());
    return RespondError(*responder, worker.status());
  }
  GenerationPlan plan{.api = GenerationJob::Api::kCompletions,
                      .model = read->model,
                      .prompts = std::move(read->prompts),
                      .sampling = std::move(read->sampling),
                      .logprobs = read->logprobs.has_value(),
                      .echoes = {},
                      .list_name = "prompt",
                      .tools = std::nullopt};
  if (read->echo) {
    for (const SequenceInput& prompt : plan.prompts) {
      if (prompt.kind == SequenceInput::Kind::kText) {
        plan.echoes.push_back(prompt.text);
        continue;
      }
      auto text = (*worker)->model().tokenizer->Decode(prompt.ids);
      plan.echoes.push_back(text.ok() ? *std::move(text) : std::string());
    }
  }
  StartGeneration(admission_, request, std::move(responder), **worker, std::move(plan),
                  std::move(scope));
}

void OpenAiService::Chat(const HttpRequest& request,
                         std::shared_ptr<HttpResponder> responder) const {
  absl::StatusOr<ChatRequest> read = ReadBody(request, ReadChatRequest);
  CallScope scope(admission_.metrics(), admission_.ModelLabel(read.ok() ? read->model : ""),
                  "openai.chat.completions");
  std::optional<GenerationJob::Tools> tools;
  auto prompt = [&]() -> absl::StatusOr<std::pair<EngineLoop*, std::string>> {
    RETURN_IF_ERROR(read.status());
    ASSIGN_OR_RETURN(EngineLoop * worker, admission_.Route(read->model, "Generate"));
    ASSIGN_OR_RETURN(std::string text, RenderChatPrompt(*worker, *read));
    if (read->tools.any()) tools = ToolsOf(*worker, *read);
    return std::make_pair(worker, std::move(text));
  }();
  if (!prompt.ok()) {
    scope.Finish(prompt.status());
    return RespondError(*responder, prompt.status());
  }
  GenerationPlan plan{.api = GenerationJob::Api::kChat,
                      .model = read->model,
                      .prompts = {SequenceInput::Text(std::move(prompt->second),
                                                      /*add_special_tokens=*/false)},
                      .sampling = std::move(read->sampling),
                      .logprobs = read->logprobs,
                      .echoes = {},
                      .list_name = "messages",
                      .tools = std::move(tools)};
  StartGeneration(admission_, request, std::move(responder), *prompt->first, std::move(plan),
                  std::move(scope));
}

void OpenAiService::Embeddings(const HttpRequest& request,
                               std::shared_ptr<HttpResponder> responder) const {
  absl::StatusOr<EmbeddingRequest> read = ReadBody(request, ReadEmbeddingRequest);
  const std::string model = read.ok() ? read->model : "";
  EmbedInput input;
  if (read.ok()) {
    input.sequences = std::move(read->inputs);
    input.normalize = read->normalize;
    input.dimensions = read->dimensions;
  }
  StartHttpUnary(
      admission_, request, std::move(responder), "openai.embeddings", read.status(), model, "Embed",
      TaskKind::kEmbed,
      [&](const EngineLoop& worker, Task& task) {
        return ValidateEmbed(input, OpenAiFieldNames("input", -1), worker, task);
      },
      [model, base64 = read.ok() && read->base64](Task& task) {
        return EmbeddingsBody(model, task.embed().embeddings, base64,
                              TokenCount(task.embed().inputs.tokens));
      },
      RespondError);
}

void OpenAiService::Rerank(const HttpRequest& request,
                           std::shared_ptr<HttpResponder> responder) const {
  absl::StatusOr<RerankHttpRequest> read = ReadBody(request, ReadRerankRequest);
  const absl::Status prepared = read.status();
  // The answer repeats the request's documents: its body keeps the request.
  auto shared =
      std::make_shared<RerankHttpRequest>(read.ok() ? *std::move(read) : RerankHttpRequest());
  StartHttpUnary(
      admission_, request, std::move(responder), "openai.rerank", prepared, shared->model, "Rerank",
      TaskKind::kClassify,
      [&](const EngineLoop& worker, Task& task) {
        return ValidateRerank(shared->input, OpenAiFieldNames("documents", -1), worker, task);
      },
      [shared](Task& task) {
        json results = json::array();
        for (const RankedDocument& ranked : server::Rank(task.classify().scores, shared->top_n)) {
          json result = {{"index", ranked.index}, {"relevance_score", ranked.score}};
          if (shared->return_documents) {
            result["document"] = {{"text", shared->input.documents[ranked.index]}};
          }
          results.push_back(std::move(result));
        }
        return json({{"id", NewId("rerank")},
                     {"model", shared->model},
                     {"usage", {{"total_tokens", TokenCount(task.classify().inputs.tokens)}}},
                     {"results", std::move(results)}})
            .dump(-1, ' ', false, json::error_handler_t::replace);
      },
      RespondError);
}

void OpenAiService::Score(const HttpRequest& request,
                          std::shared_ptr<HttpResponder> responder) const {
  absl::StatusOr<ScoreHttpRequest> read = ReadBody(request, ReadScoreRequest);
  const std::string model = read.ok() ? read->model : "";
  // A score is a cross-encoder's one relevance: models that rerank answer it.
  StartHttpUnary(
      admission_, request, std::move(responder), "openai.score", read.status(), model, "Rerank",
      TaskKind::kClassify,
      [&](const EngineLoop& worker, Task& task) {
        return ValidateClassify(read->input, OpenAiFieldNames("text_1", -1, "text_2"), worker,
                                task);
      },
      [model](Task& task) {
        json data = json::array();
        const ClassifyJob& job = task.classify();
        for (size_t i = 0; i < job.scores.size(); ++i) {
          data.push_back({{"index", i}, {"object", "score"}, {"score", job.scores[i][0]}});
        }
        const int64_t tokens = TokenCount(job.inputs.tokens);
        return json({{"id", NewId("score")},
                     {"object", "list"},
                     {"created", absl::ToUnixSeconds(absl::Now())},
                     {"model", model},
                     {"data", std::move(data)},
                     {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}})
            .dump(-1, ' ', false, json::error_handler_t::replace);
      },
      RespondError);
}

void OpenAiService::Tokenize(const HttpRequest& request, HttpResponder& responder) const {
  absl::StatusOr<TokenizeHttpRequest> read = ReadBody(request, ReadTokenizeRequest);
  CallScope scope(admission_.metrics(), admission_.ModelLabel(read.ok() ? read->model : ""),
                  "openai.tokenize");
  auto answer = [&]() -> absl::StatusOr<json> {
    RETURN_IF_ERROR(read.status());
    ASSIGN_OR_RETURN(EngineLoop * worker, admission_.Route(read->model, "Tokenize"));
    TokenizeInput input;
    input.omit_special_tokens = !read->add_special_tokens;
    if (read->chat) {
      ASSIGN_OR_RETURN(input.text, RenderChatPrompt(*worker, *read->chat));
    } else {
      input.text = *read->prompt;
    }
    const bool chat = read->chat.has_value();
    ASSIGN_OR_RETURN(
        auto tokens,
        server::Tokenize(input, OpenAiFieldNames(chat ? "messages" : "prompt", -1), *worker));
    json ids = json::array(), texts = json::array();
    for (const TokenSpan& token : tokens) {
      ids.push_back(token.id);
      texts.push_back(token.text);
    }
    json answer = {{"count", tokens.size()},
                   {"max_model_len", worker->max_context()},
                   {"tokens", std::move(ids)},
                   {"token_strs", std::move(texts)}};
    // The rendered chat prompt, to see what the template made of the messages.
    if (chat) answer["prompt"] = std::move(input.text);
    return answer;
  }();
  scope.Finish(answer.status());
  if (!answer.ok()) return RespondError(responder, answer.status());
  RespondJson(responder, *answer);
}

void OpenAiService::Detokenize(const HttpRequest& request, HttpResponder& responder) const {
  absl::StatusOr<DetokenizeHttpRequest> read = ReadBody(request, ReadDetokenizeRequest);
  CallScope scope(admission_.metrics(), admission_.ModelLabel(read.ok() ? read->model : ""),
                  "openai.detokenize");
  auto answer = [&]() -> absl::StatusOr<std::string> {
    RETURN_IF_ERROR(read.status());
    ASSIGN_OR_RETURN(EngineLoop * worker, admission_.Route(read->model, "Detokenize"));
    return server::Detokenize(
        DetokenizeInput{.ids = std::move(read->tokens), .skip_special_tokens = false},
        OpenAiFieldNames("tokens", -1), *worker);
  }();
  scope.Finish(answer.status());
  if (!answer.ok()) return RespondError(responder, answer.status());
  RespondJson(responder, {{"prompt", *answer}});
}

}  // namespace attnserve::server
