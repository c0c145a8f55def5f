// The OpenAI-compatible API's requests (docs/openai.md), read from their JSON bodies into the
// core's inputs (server/frontend/method_inputs.h). Fields vLLM and llama.cpp's server accept are
// read; unknown fields are ignored, as OpenAI's clients send some of their own; a known field the
// server does not implement is refused when it asks for anything but its default. Every refusal
// is INVALID_ARGUMENT naming the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/frontend/method_inputs.h"
#include "server/frontend/rerank.h"
#include "server/http/openai/openai_tools.h"

namespace attnserve::server {

// Limits on one request's shape, checked before anything is built from it.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr int64_t kMaxChoices = 16;  // `n`

// What completions and chat completions share.
struct OpenAiSampling {
  GenerateInput generate;  // the prompt is each choice's own
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

struct CompletionRequest {
  std::string model;
  std::vector<SequenceInput> prompts;
  OpenAiSampling sampling;
  bool echo = false;
  std::optional<int64_t> logprobs;  // the legacy field: how many alternatives per token
};

struct ChatRequest {
  std::string model;
  // What the chat template renders: messages, add_generation_prompt, tools and
  // chat_template_kwargs' keys (the tokenizer's bos_token and eos_token are added to it).
  nlohmann::ordered_json template_context;
  std::string template_name;  // a named template of the model's ("tool_use"); empty: its default
  ToolRequest tools;
  OpenAiSampling sampling;
  bool logprobs = false;
};

struct EmbeddingRequest {
  std::string model;
  std::vector<SequenceInput> inputs;
  bool base64 = false;     // encoding_format
  bool normalize = true;   // as OpenAI's embeddings are; an extension field turns it off
  int64_t dimensions = 0;  // the first values of each vector kept, renormalized; 0: all
};

// vLLM's /tokenize: a prompt, or messages through the chat template.
struct TokenizeHttpRequest {
  std::string model;
  std::optional<std::string> prompt;
  std::optional<ChatRequest> chat;
  bool add_special_tokens = true;
};

struct DetokenizeHttpRequest {
  std::string model;
  std::vector<int64_t> tokens;
};

// The body as JSON: refused when it is not JSON, not an object, or nests deeper than
// kMaxJsonDepth (the parser recurses).
absl::StatusOr<nlohmann::ordered_json> ParseJsonBody(const std::string& body);

absl::StatusOr<CompletionRequest> ReadCompletionRequest(const nlohmann::ordered_json& body);
absl::StatusOr<ChatRequest> ReadChatRequest(const nlohmann::ordered_json& body);
absl::StatusOr<EmbeddingRequest> ReadEmbeddingRequest(const nlohmann::ordered_json& body);
absl::StatusOr<TokenizeHttpRequest> ReadTokenizeRequest(const nlohmann::ordered_json& body);
absl::StatusOr<DetokenizeHttpRequest> ReadDetokenizeRequest(const nlohmann::ordered_json& body);

// Cohere's, Jina's and vLLM's rerank: a query and its documents (strings, or objects with a
// "text"); documents too long for the context lose their end.
struct RerankHttpRequest {
  std::string model;
  RerankInput input;
  int64_t top_n = 0;             // 0: all
  bool return_documents = true;  // as vLLM and Jina answer; Cohere's clients ask
};

// vLLM's score: text_1 (one for all, or one per text_2) paired with each of text_2.
struct ScoreHttpRequest {
  std::string model;
  ClassifyInput input;
};

absl::StatusOr<RerankHttpRequest> ReadRerankRequest(const nlohmann::ordered_json& body);
absl::StatusOr<ScoreHttpRequest> ReadScoreRequest(const nlohmann::ordered_json& body);

// The API's names for the core's fields; `list` names the request's list field ("prompt",
// "input", "messages") and `row` the entry of it one choice or input came from (-1: none).
class OpenAiFieldNames final : public FieldNames {
 public:
  // `pairs`: the list of the second texts of pairs (vLLM's score's "text_2"), when there is one.
  OpenAiFieldNames(std::string list, int64_t row, std::string pairs = "")
      : list_(std::move(list)), row_(row), pairs_(std::move(pairs)) {}
  std::string Name(const FieldPath& path) const override;

 private:
  std::string list_;
  int64_t row_;
  std::string pairs_;
};

}  // namespace attnserve::server
