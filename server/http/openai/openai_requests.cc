#include "server/http/openai/openai_requests.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/frontend/request_validation.h"
#include "server/http/json_fields.h"
#include "server/http/openai/openai_constraints.h"

namespace attnserve::server {
namespace {

using json = nlohmann::ordered_json;
using Field = FieldPath::Field;
using Part = FieldPath::Part;

// Fields of OpenAI's API the server does not implement: refused unless they ask for the default.
absl::Status RefuseUnsupported(const json& body) {
  for (const char* name : {"frequency_penalty", "presence_penalty"}) {
    if (const json* value = FindField(body, name); value != nullptr) {
      if (!value->is_number() || value->get<double>() != 0.0) {
        return InvalidField(name, "is not supported: only 0");
      }
    }
  }
  if (const json* value = FindField(body, "repetition_penalty"); value != nullptr) {
    if (!value->is_number() || value->get<double>() != 1.0) {
      return InvalidField("repetition_penalty", "is not supported: only 1");
    }
  }
  if (const json* value = FindField(body, "logit_bias");
      value != nullptr && !(value->is_object() && value->empty())) {
    return InvalidField("logit_bias", "is not supported");
  }
  if (const json* value = FindField(body, "best_of"); value != nullptr) {
    if (!value->is_number_integer() || value->get<int64_t>() != 1) {
      return InvalidField("best_of", "is not supported: only 1");
    }
  }
  if (const json* value = FindField(body, "suffix"); value != nullptr) {
    return InvalidField("suffix", "is not supported");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> StopSequences(const json& body) {
  const json* value = FindField(body, "stop");
  if (value == nullptr) return std::vector<std::string>{};
  if (value->is_string()) return std::vector{value->get<std::string>()};
  if (!value->is_array()) return InvalidField("stop", "must be a string or a list of strings");
  std::vector<std::string> stop;
  for (size_t i = 0; i < value->size() && i <= 64; ++i) {  // validation bounds the count
    if (!(*value)[i].is_string())
      return InvalidField(absl::StrCat("stop[", i, "]"), "must be a string");
    stop.push_back((*value)[i].get<std::string>());
  }
  if (value->size() > 64) stop.resize(65);  // enough for validation to refuse, naming the count
  return stop;
}

// What completions and chat share: sampling, n, stream.
absl::StatusOr<OpenAiSampling> Sampling(const json& body, int64_t default_max_tokens) {
  RETURN_IF_ERROR(RefuseUnsupported(body));
  OpenAiSampling sampling;
  GenerateInput& generate = sampling.generate;
  constexpr int64_t kLarge = int64_t{1} << 40;
  // Chat's newer name wins over the deprecated one, as in OpenAI's API.
  ASSIGN_OR_RETURN(generate.max_tokens, Int(body, "max_tokens", default_max_tokens, 1, kLarge));
  ASSIGN_OR_RETURN(generate.max_tokens,
                   Int(body, "max_completion_tokens", generate.max_tokens, 1, kLarge));
  // OpenAI's default temperature is 1; 0 is greedy.
  ASSIGN_OR_RETURN(generate.temperature, Number(body, "temperature", 1.0f));
  ASSIGN_OR_RETURN(generate.top_p, Number(body, "top_p", 1.0f));
  // vLLM's -1 and llama.cpp's 0 both mean no top-k.
  ASSIGN_OR_RETURN(generate.top_k, Int(body, "top_k", 0, -1, kLarge));
  if (generate.top_k < 0) generate.top_k = 0;
  if (const json* seed = FindField(body, "seed"); seed != nullptr) {
    if (!seed->is_number_integer()) return InvalidField("seed", "must be an integer");
    generate.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                               : static_cast<uint64_t>(seed->get<int64_t>());
  }
  ASSIGN_OR_RETURN(generate.stop, StopSequences(body));
  // vLLM's and llama.cpp's extensions, for benchmarks that need exactly N tokens.
  ASSIGN_OR_RETURN(generate.ignore_eos, Bool(body, "ignore_eos", false));
  ASSIGN_OR_RETURN(generate.min_tokens, Int(body, "min_tokens", 0, 0, kLarge));
  ASSIGN_OR_RETURN(generate.constraint, ReadConstraint(body));
  ASSIGN_OR_RETURN(sampling.n, Int(body, "n", 1, 1, kMaxChoices));
  ASSIGN_OR_RETURN(sampling.stream, Bool(body, "stream", false));
  if (const json* options = FindField(body, "stream_options"); options != nullptr) {
    if (!options->is_object()) return InvalidField("stream_options", "must be an object");
    if (!sampling.stream) return InvalidField("stream_options", "needs \"stream\": true");
    ASSIGN_OR_RETURN(sampling.include_usage, Bool(*options, "include_usage", false));
  }
  return sampling;
}

// A chat message's content as the template sees it: a string, or a list of text parts (kept as
// a list: templates that take parts read them; others get them joined by the caller's choice).
absl::Status CheckMessages(const json& messages) {
  if (!messages.is_array()) return InvalidField("messages", "must be a list of messages");
  if (messages.empty()) return InvalidField("messages", "is empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& message = messages[i];
    const std::string name = absl::StrCat("messages[", i, "]");
    if (!message.is_object()) return InvalidField(name, "must be an object");
    const json* role = FindField(message, "role");
    if (role == nullptr || !role->is_string())
      return InvalidField(name + ".role", "must be a string");
    const json* content = FindField(message, "content");
    if (content == nullptr || content->is_string()) continue;
    if (!content->is_array()) {
      return InvalidField(name + ".content", "must be a string or a list of content parts");
    }
    for (size_t j = 0; j < content->size(); ++j) {
      const json& part = (*content)[j];
      const std::string part_name = absl::StrCat(name, ".content[", j, "]");
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        return InvalidField(part_name, "must be a text part {\"type\": \"text\", \"text\": ...}");
      }
    }
  }
  return absl::OkStatus();
}

// Parts whose texts the template is to see as one string: the common case, and what vLLM does
// for templates that expect strings.
json FlattenContent(const json& messages) {
  json flat = messages;
  for (json& message : flat) {
    auto content = message.find("content");
    if (content == message.end() || !content->is_array()) continue;
    std::string text;
    for (const json& part : *content) {
      if (!text.empty()) text += "\n";
      text += part["text"].get<std::string>();
    }
    *content = text;
  }
  return flat;
}

absl::StatusOr<ChatRequest> ChatTemplateInput(const json& body) {
  ChatRequest chat;
  ASSIGN_OR_RETURN(chat.model, RequiredString(body, "model"));
  const json* messages = FindField(body, "messages");
  if (messages == nullptr) return InvalidField("messages", "is missing");
  RETURN_IF_ERROR(CheckMessages(*messages));
  json context = json::object();
  if (const json* kwargs = FindField(body, "chat_template_kwargs"); kwargs != nullptr) {
    if (!kwargs->is_object()) return InvalidField("chat_template_kwargs", "must be an object");
    context = *kwargs;
  }
  context["messages"] = FlattenContent(*messages);
  ArgumentsAsObjects(context["messages"]);
  ASSIGN_OR_RETURN(bool add_generation_prompt, Bool(body, "add_generation_prompt", true));
  context["add_generation_prompt"] = add_generation_prompt;
  ASSIGN_OR_RETURN(chat.tools, ReadTools(body));
  if (chat.tools.tools.is_array()) context["tools"] = chat.tools.tools;
  if (const json* documents = FindField(body, "documents"); documents != nullptr) {
    context["documents"] = *documents;
  }
  chat.template_context = std::move(context);
  if (const json* name = FindField(body, "chat_template"); name != nullptr) {
    if (!name->is_string()) return InvalidField("chat_template", "must be a template's name");
    chat.template_name = name->get<std::string>();
  }
  return chat;
}

// Counts nesting outside strings; the parser recurses once per level.
absl::Status CheckDepth(const std::string& body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("the body nests deeper than ", kMaxJsonDepth, " levels"));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<json> ParseJsonBody(const std::string& body) {
  RETURN_IF_ERROR(CheckDepth(body));
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the body is not valid JSON: ", e.what()));
  }
  if (!parsed.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  return parsed;
}

absl::StatusOr<CompletionRequest> ReadCompletionRequest(const json& body) {
  CompletionRequest request;
  ASSIGN_OR_RETURN(request.model, RequiredString(body, "model"));
  ASSIGN_OR_RETURN(request.sampling, Sampling(body, /*default_max_tokens=*/16));
  ASSIGN_OR_RETURN(request.prompts, Sequences(body, "prompt", 256 / request.sampling.n));
  ASSIGN_OR_RETURN(request.echo, Bool(body, "echo", false));
  if (FindField(body, "logprobs") != nullptr) {
    ASSIGN_OR_RETURN(request.logprobs, Int(body, "logprobs", 0, 0, 20));
    request.sampling.generate.top_logprobs = *request.logprobs;
  }
  return request;
}

absl::StatusOr<ChatRequest> ReadChatRequest(const json& body) {
  ASSIGN_OR_RETURN(ChatRequest chat, ChatTemplateInput(body));
  // 0: unbounded, as in OpenAI's API; the service asks for the whole context, which validation
  // cuts to the room the prompt leaves.
  ASSIGN_OR_RETURN(chat.sampling, Sampling(body, /*default_max_tokens=*/0));
  if (std::optional<GenerateInput::Constraint> forced = ToolConstraint(chat.tools)) {
    if (chat.sampling.generate.constraint) {
      return InvalidField(chat.sampling.generate.constraint->field,
                          "cannot be given with a required or named tool_choice");
    }
    chat.sampling.generate.constraint = std::move(forced);
  }
  ASSIGN_OR_RETURN(chat.logprobs, Bool(body, "logprobs", false));
  ASSIGN_OR_RETURN(const int64_t top, Int(body, "top_logprobs", 0, 0, 20));
  if (top > 0 && !chat.logprobs) return InvalidField("top_logprobs", "needs \"logprobs\": true");
  chat.sampling.generate.top_logprobs = top;
  return chat;
}

absl::StatusOr<EmbeddingRequest> ReadEmbeddingRequest(const json& body) {
  EmbeddingRequest request;
  ASSIGN_OR_RETURN(request.model, RequiredString(body, "model"));
  ASSIGN_OR_RETURN(request.inputs, Sequences(body, "input", 256));
  if (const json* format = FindField(body, "encoding_format"); format != nullptr) {
    if (*format == "base64") {
      request.base64 = true;
    } else if (*format != "float") {
      return InvalidField("encoding_format", "must be \"float\" or \"base64\"");
    }
  }
  ASSIGN_OR_RETURN(request.dimensions, Int(body, "dimensions", 0, 1, 1 << 20));
  ASSIGN_OR_RETURN(request.normalize, Bool(body, "normalize", true));
  return request;
}

absl::StatusOr<TokenizeHttpRequest> ReadTokenizeRequest(const json& body) {
  TokenizeHttpRequest request;
  if (FindField(body, "messages") != nullptr) {
    ASSIGN_OR_RETURN(request.chat, ChatTemplateInput(body));
    request.model = request.chat->model;
    ASSIGN_OR_RETURN(request.add_special_tokens, Bool(body, "add_special_tokens", false));
    return request;
  }
  ASSIGN_OR_RETURN(request.model, RequiredString(body, "model"));
  ASSIGN_OR_RETURN(request.prompt, RequiredString(body, "prompt"));
  ASSIGN_OR_RETURN(request.add_special_tokens, Bool(body, "add_special_tokens", true));
  return request;
}

absl::StatusOr<DetokenizeHttpRequest> ReadDetokenizeRequest(const json& body) {
  DetokenizeHttpRequest request;
  ASSIGN_OR_RETURN(request.model, RequiredString(body, "model"));
  const json* tokens = FindField(body, "tokens");
  if (tokens == nullptr) return InvalidField("tokens", "is missing");
  if (!tokens->is_array()) return InvalidField("tokens", "must be a list of token ids");
  ASSIGN_OR_RETURN(request.tokens, TokenIds(*tokens, "tokens"));
  return request;
}

absl::StatusOr<RerankHttpRequest> ReadRerankRequest(const json& body) {
  RerankHttpRequest request;
  ASSIGN_OR_RETURN(request.model, RequiredString(body, "model"));
  ASSIGN_OR_RETURN(request.input.query, RequiredString(body, "query"));
  const json* documents = FindField(body, "documents");
  if (documents == nullptr) return InvalidField("documents", "is missing");
  if (!documents->is_array()) return InvalidField("documents", "must be a list");
  if (documents->size() > kMaxClassifyItems) {
    return InvalidField("documents", absl::StrCat("has ", documents->size(), " entries; at most ",
                                                  kMaxClassifyItems));
  }
  for (size_t i = 0; i < documents->size(); ++i) {
    const json& document = (*documents)[i];
    const json* text = document.is_object() ? FindField(document, "text") : &document;
    if (text == nullptr || !text->is_string()) {
      return InvalidField(absl::StrCat("documents[", i, "]"),
                          "must be a string or an object with a string \"text\"");
    }
    request.input.documents.push_back(text->get<std::string>());
  }
  ASSIGN_OR_RETURN(request.top_n, Int(body, "top_n", 0, 0, 1 << 30));
  ASSIGN_OR_RETURN(request.return_documents, Bool(body, "return_documents", true));
  ASSIGN_OR_RETURN(request.input.raw_scores, Bool(body, "raw_scores", false));
  request.input.truncate = true;
  // JSON may escape a byte as six ("\u0001"); the answer's bound is scaled by four.
  request.input.echo_scale = request.return_documents ? 2 : 0;
  return request;
}

absl::StatusOr<ScoreHttpRequest> ReadScoreRequest(const json& body) {
  ScoreHttpRequest request;
  ASSIGN_OR_RETURN(request.model, RequiredString(body, "model"));
  ASSIGN_OR_RETURN(auto firsts, Strings(body, "text_1", kMaxClassifyItems));
  ASSIGN_OR_RETURN(auto seconds, Strings(body, "text_2", kMaxClassifyItems));
  if (firsts.size() != 1 && firsts.size() != seconds.size()) {
    return InvalidField("text_1",
                        absl::StrCat("has ", firsts.size(), " texts; give one, or one per text_2 (",
                                     seconds.size(), ")"));
  }
  for (size_t i = 0; i < seconds.size(); ++i) {
    request.input.items.push_back(
        {SequenceInput::Text(firsts[firsts.size() == 1 ? 0 : i]), std::move(seconds[i])});
  }
  ASSIGN_OR_RETURN(request.input.raw_scores, Bool(body, "raw_scores", false));
  request.input.truncation = {
      .enabled = true, .strategy = Truncation::Strategy::kOnlySecond, .from_left = false};
  return request;
}

std::string OpenAiFieldNames::Name(const FieldPath& path) const {
  if (const char* parameter = ParameterName(path.field)) return parameter;
  switch (path.field) {
    case Field::kSequences:
    case Field::kSequence:
    case Field::kPrompt:
    case Field::kText: {
      const int64_t row = path.row >= 0 ? path.row : row_;
      const std::string& list = path.part == Part::kPairText ? pairs_ : list_;
      std::string name = row >= 0 ? absl::StrCat(list, "[", row, "]") : list;
      if (path.part == Part::kTokenIds && path.element >= 0) {
        absl::StrAppend(&name, "[", path.element, "]");
      }
      return name;
    }
    case Field::kIds:
      return path.element >= 0 ? absl::StrCat("tokens[", path.element, "]") : "tokens";
    case Field::kSources:
    case Field::kSource:
      return "source";
    case Field::kFeatureSets:
      return "input";
    case Field::kStop:
      return path.row >= 0 ? absl::StrCat("stop[", path.row, "]") : "stop";
    case Field::kQuery:
      return "query";
    case Field::kDocuments:
      return path.row >= 0 ? absl::StrCat(list_, "[", path.row, "]") : list_;
    case Field::kTopK:
    case Field::kTemperature:
    case Field::kTopP:
    case Field::kMaxTokens:
    case Field::kMinTokens:
    case Field::kTopLogprobs:
    case Field::kPooling:
    case Field::kHeadLayers:
    case Field::kDimensions:
    case Field::kPromptName:
      break;  // ParameterName's
  }
  return list_;
}

}  // namespace attnserve::server
