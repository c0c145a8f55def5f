// The OpenAI-compatible API's answers, as JSON, built from the core's results
// (server/core/results.h): completions and their stream chunks, chat completions and theirs,
// embeddings, the model list, and errors in OpenAI's shape with the matching HTTP status.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/core/results.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tool_calls/tool_call_format.h"

namespace attnserve::server {

// {"error": {"message", "type", "param", "code"}} and its HTTP status: 400 for a bad request,
// 404 for an unknown model or path, 413 for what is too large to admit, 429 for a full server,
// 503 while shutting down, 504 past a deadline, 500 otherwise.
int HttpStatusOf(const absl::Status& status);
// `http_status` 0: HttpStatusOf(status).
std::string ErrorBody(const absl::Status& status, int http_status = 0);

// One generated choice: its text so far, its token events (for log-probabilities) and, once
// finished, its end.
struct ChoiceText {
  int64_t index = 0;
  std::string text;
  std::vector<GenerationEvent> tokens;
  std::optional<FinishReason> finish;
  std::vector<tool_calls::ToolCall> tool_calls;  // chat: the calls its answer made
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// What every answer of one request repeats.
struct AnswerHeader {
  std::string id;  // "cmpl-...", "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// "stop" for an end of text or a stop sequence, "length" for max_tokens or a full context.
const char* FinishReasonName(FinishReason reason);

// /v1/completions: the whole answer, and a stream's chunk (choices with new text, or the usage
// chunk when `choices` is empty and `usage` is set). `logprobs` asks for the legacy log-probability
// object; `text_offset` counts from the start of each choice's text.
std::string CompletionBody(const AnswerHeader& header, const std::vector<ChoiceText>& choices,
                           bool logprobs, const Usage& usage, const Tokenizer& tokenizer);
std::string CompletionChunk(const AnswerHeader& header, const std::vector<ChoiceText>& choices,
                            bool logprobs, const std::optional<Usage>& usage,
                            const Tokenizer& tokenizer);

// /v1/chat/completions, the same way; a chunk's delta carries the role on a choice's first
// chunk (`first`).
std::string ChatBody(const AnswerHeader& header, const std::vector<ChoiceText>& choices,
                     bool logprobs, const Usage& usage, const Tokenizer& tokenizer);
std::string ChatChunk(const AnswerHeader& header, const std::vector<ChoiceText>& choices,
                      bool first, bool logprobs, const std::optional<Usage>& usage,
                      const Tokenizer& tokenizer);

// /v1/embeddings: float lists, or base64 of little-endian float32 as OpenAI's clients decode.
std::string EmbeddingsBody(const std::string& model, const std::vector<Embedding>& embeddings,
                           bool base64, int64_t prompt_tokens);

// A server-sent event: "data: <json>\n\n".
std::string Event(const std::string& json);

}  // namespace attnserve::server
