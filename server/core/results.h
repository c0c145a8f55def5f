// What the server's core answers, in no protocol's terms: the executor fills these in, and each
// protocol's edge (attnserve.v1 in server/grpc/v1/v1_messages.h, the Open Inference Protocol in
// server/open_inference/infer_answers.h) builds its own messages from them on its own side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnserve::server {

struct TokenChoice {
  int64_t id = 0;
  std::string text;  // the token's spelling in the vocabulary
  float probability = 0.0f;
  float log_probability = 0.0f;
};

// NextToken, per sequence: the top-k next tokens, the sequence's length, and the whole
// distribution when asked for (else empty).
struct NextTokenRow {
  std::vector<TokenChoice> top;
  int64_t input_tokens = 0;
  std::vector<float> distribution;
};

struct ScoredToken {
  int64_t id = 0;
  std::string text;
  float log_probability = 0.0f;  // given the tokens before it
};

// Score: every token after the first, and their sum.
struct ScoreResult {
  std::vector<ScoredToken> tokens;
  double total_log_probability = 0.0;
};

// The per-head contributions of one layer to one sequence's tokens: [rows, heads, width].
struct HeadContributions {
  int64_t layer = 0, heads = 0, rows = 0, width = 0;
  std::vector<float> values;
};

// Embed, per sequence: `rows` vectors of `width` (one when pooled; one per token otherwise).
struct Embedding {
  int64_t rows = 0, width = 0;
  std::vector<float> values;
  std::vector<HeadContributions> head_contributions;
};

// kConstraintComplete: the answer completed its constraint (JSON schema, regex, grammar), which
// admits nothing more.
enum class FinishReason {
  kMaxTokens,
  kStopSequence,
  kEndOfText,
  kContextFull,
  kConstraintComplete
};

// One event of a generation: a token with the text it completes (possibly empty: a piece holds
// whole characters), or the end, with anything the stream still held back.
struct GenerationEvent {
  bool finished = false;
  int64_t id = 0;  // a token's
  std::string text;
  float log_probability = 0.0f;
  std::vector<TokenChoice> top = {};  // the most likely tokens in its place, when asked for
  FinishReason reason = FinishReason::kMaxTokens;  // the end's
  int64_t prompt_tokens = 0, generated_tokens = 0;
};

// Tokenize, per token: its id, spelling, the bytes of the text it covers and whether it is a
// special token.
struct TokenSpan {
  int64_t id = 0;
  std::string text;
  int64_t start = 0, end = 0;
  bool special = false;
};

}  // namespace attnserve::server
