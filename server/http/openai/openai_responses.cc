#include "server/http/openai/openai_responses.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/core/call_gate.h"
#include "server/frontend/field_error.h"

namespace attnserve::server {
namespace {

using json = nlohmann::json;

// A float's shortest decimal form, as a double that prints the same: 0.1f stays 0.1 rather
// than 0.10000000149011612.
double Short(float value) {
  if (!std::isfinite(value)) return value < 0 ? -1e30 : 1e30;  // JSON has no infinities
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof(buffer), value).ptr;
  double shortest = 0;
  std::from_chars(buffer, end, shortest);
  return shortest;
}

std::string Dump(const json& value) {
  // Texts are valid UTF-8 (the tokenizer replaces what is not); replace guards the rest.
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

json Bytes(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(c);
  return bytes;
}

json UsageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json Finish(const ChoiceText& choice) {
  // An answer cut short keeps "length": its last call's arguments may not parse.
  if (choice.finish && !choice.tool_calls.empty() &&
      FinishReasonName(*choice.finish) != std::string_view("length")) {
    return "tool_calls";
  }
  return choice.finish ? json(FinishReasonName(*choice.finish)) : json(nullptr);
}

// A choice's tool calls in OpenAI's shape; streamed, each with its place in the list.
json ToolCalls(const AnswerHeader& header, const ChoiceText& choice, bool streamed) {
  json calls = json::array();
  for (size_t i = 0; i < choice.tool_calls.size(); ++i) {
    const tool_calls::ToolCall& call = choice.tool_calls[i];
    json entry = {{"id", absl::StrCat("call_", header.id.substr(header.id.find('-') + 1, 16), "_",
                                      choice.index, "_", i)},
                  {"type", "function"},
                  {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
    if (streamed) entry["index"] = i;
    calls.push_back(std::move(entry));
  }
  return calls;
}

// The legacy completions log-probabilities: parallel lists.
json CompletionLogprobs(const ChoiceText& choice, const Tokenizer& tokenizer) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  int64_t offset = static_cast<int64_t>(choice.text.size());
  for (const GenerationEvent& event : choice.tokens) offset -= event.text.size();
  offset = std::max<int64_t>(offset, 0);
  for (const GenerationEvent& event : choice.tokens) {
    tokens.push_back(tokenizer.TokenText(event.id));
    token_logprobs.push_back(Short(event.log_probability));
    json alternatives = json::object();
    for (const TokenChoice& alternative : event.top) {
      alternatives[alternative.text] = Short(alternative.log_probability);
    }
    top.push_back(std::move(alternatives));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(event.text.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

json ChatLogprobs(const ChoiceText& choice, const Tokenizer& tokenizer) {
  json content = json::array();
  for (const GenerationEvent& event : choice.tokens) {
    const std::string token = tokenizer.TokenText(event.id);
    json top = json::array();
    for (const TokenChoice& alternative : event.top) {
      top.push_back({{"token", alternative.text},
                     {"logprob", Short(alternative.log_probability)},
                     {"bytes", Bytes(alternative.text)}});
    }
    content.push_back({{"token", token},
                       {"logprob", Short(event.log_probability)},
                       {"bytes", Bytes(token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json Header(const AnswerHeader& header, const char* object) {
  return {
      {"id", header.id}, {"object", object}, {"created", header.created}, {"model", header.model}};
}

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 401:
    case 413:
      return "invalid_request_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    case 504:
      return "timeout_error";
    default:
      return "server_error";
  }
}

}  // namespace

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kUnimplemented:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kUnavailable:
      return IsShuttingDown(status) ? 503 : 429;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kCancelled:
      return 499;  // the client went away; nobody reads it
    default:
      return 500;
  }
}

std::string ErrorBody(const absl::Status& status, int http_status) {
  if (http_status == 0) http_status = HttpStatusOf(status);
  const std::optional<std::string> field = ErrorField(status);
  return Dump({{"error",
                {{"message", std::string(status.message())},
                 {"type", ErrorType(http_status)},
                 {"param", field ? json(*field) : json(nullptr)},
                 // OpenAI's own code for a missing or wrong key, which its clients show.
                 {"code", http_status == 401 ? json("invalid_api_key") : json(http_status)}}}});
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEndOfText:
    case FinishReason::kStopSequence:
    case FinishReason::kConstraintComplete:  // as OpenAI and vLLM answer a completed schema
      return "stop";
    case FinishReason::kMaxTokens:
    case FinishReason::kContextFull:
      return "length";
  }
  return "stop";
}

std::string CompletionBody(const AnswerHeader& header, const std::vector<ChoiceText>& choices,
                           bool logprobs, const Usage& usage, const Tokenizer& tokenizer) {
  // A whole answer is its stream's one chunk, with the usage.
  return CompletionChunk(header, choices, logprobs, usage, tokenizer);
}

std::string CompletionChunk(const AnswerHeader& header, const std::vector<ChoiceText>& choices,
                            bool logprobs, const std::optional<Usage>& usage,
                            const Tokenizer& tokenizer) {
  json body = Header(header, "text_completion");
  json list = json::array();
  for (const ChoiceText& choice : choices) {
    list.push_back({{"index", choice.index},
                    {"text", choice.text},
                    {"logprobs", logprobs ? CompletionLogprobs(choice, tokenizer) : json(nullptr)},
                    {"finish_reason", Finish(choice)}});
  }
  body["choices"] = std::move(list);
  body["usage"] = usage ? UsageJson(*usage) : json(nullptr);
  return Dump(body);
}

std::string ChatBody(const AnswerHeader& header, const std::vector<ChoiceText>& choices,
                     bool logprobs, const Usage& usage, const Tokenizer& tokenizer) {
  json body = Header(header, "chat.completion");
  json list = json::array();
  for (const ChoiceText& choice : choices) {
    json message = {{"role", "assistant"}, {"content", choice.text}};
    if (!choice.tool_calls.empty()) {
      if (choice.text.empty()) message["content"] = nullptr;
      message["tool_calls"] = ToolCalls(header, choice, /*streamed=*/false);
    }
    list.push_back({{"index", choice.index},
                    {"message", std::move(message)},
                    {"logprobs", logprobs ? ChatLogprobs(choice, tokenizer) : json(nullptr)},
                    {"finish_reason", Finish(choice)}});
  }
  body["choices"] = std::move(list);
  body["usage"] = UsageJson(usage);
  return Dump(body);
}

std::string ChatChunk(const AnswerHeader& header, const std::vector<ChoiceText>& choices,
                      bool first, bool logprobs, const std::optional<Usage>& usage,
                      const Tokenizer& tokenizer) {
  json body = Header(header, "chat.completion.chunk");
  json list = json::array();
  for (const ChoiceText& choice : choices) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !choice.text.empty()) delta["content"] = choice.text;
    if (!choice.tool_calls.empty())
      delta["tool_calls"] = ToolCalls(header, choice, /*streamed=*/true);
    list.push_back({{"index", choice.index},
                    {"delta", std::move(delta)},
                    {"logprobs", logprobs ? ChatLogprobs(choice, tokenizer) : json(nullptr)},
                    {"finish_reason", Finish(choice)}});
  }
  body["choices"] = std::move(list);
  if (usage) body["usage"] = UsageJson(*usage);
  return Dump(body);
}

std::string EmbeddingsBody(const std::string& model, const std::vector<Embedding>& embeddings,
                           bool base64, int64_t prompt_tokens) {
  // Written by hand: a float's shortest form, and no tree of a million numbers.
  std::string body = R"({"object":"list","data":[)";
  char number[32];
  for (size_t i = 0; i < embeddings.size(); ++i) {
    const std::vector<float>& values = embeddings[i].values;
    absl::StrAppend(&body, i > 0 ? "," : "", R"({"object":"embedding","index":)", i,
                    R"(,"embedding":)");
    if (base64) {
      std::string bytes(values.size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), values.data(), bytes.size());  // x86: little-endian already
      absl::StrAppend(&body, "\"", absl::Base64Escape(bytes), "\"}");
      continue;
    }
    body += '[';
    for (size_t j = 0; j < values.size(); ++j) {
      if (j > 0) body += ',';
      const float value = std::isfinite(values[j]) ? values[j] : 0.0f;
      body.append(number, std::to_chars(number, number + sizeof(number), value).ptr);
    }
    body += "]}";
  }
  absl::StrAppend(&body, R"(],"model":)", Dump(model), R"(,"usage":{"prompt_tokens":)",
                  prompt_tokens, R"(,"total_tokens":)", prompt_tokens, "}}");
  return body;
}

std::string Event(const std::string& json) { return absl::StrCat("data: ", json, "\n\n"); }

}  // namespace attnserve::server
