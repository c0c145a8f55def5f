// Turning the engine's outputs into the core's results (server/core/results.h), and knowing before
// the engine runs how large an answer can be on the wire.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/architectures/model.h"
#include "engine/tensor.h"
#include "server/core/task.h"

namespace attnserve::server {

// The most bytes the task's answer can take on the wire, from its validated inputs alone.
int64_t ResponseBytesBound(const Task& task, const Model& model);

// The `k` most likely tokens of raw next-token `logits` with their log-probabilities (a
// generated token's alternatives); `log_sum` is the logits' log-sum-exp.
std::vector<TokenChoice> TopChoices(const float* logits, int64_t vocab, int64_t k, float log_sum,
                                    const Tokenizer& tokenizer);

// One sequence's NextToken result from its next-token logits (one row of vocab floats).
NextTokenRow MakeNextTokenRow(const float* logits, int64_t vocab, int64_t input_tokens,
                              const NextTokenJob& job, const Tokenizer& tokenizer);

// The log-probability of each token of `ids` after the ones before it; logits: [T, vocab].
ScoreResult MakeScoreResult(const Tensor& logits, const std::vector<int64_t>& ids,
                            const Tokenizer& tokenizer);

// What a request asks of its vectors: the first `dimensions` values of each (0: all), then
// L2-normalized when `normalize`.
struct EmbeddingShaping {
  bool normalize = false;
  int64_t dimensions = 0;
};

// Embeddings from output [B, rows, width] with each sequence's row count, shaped, and per-head
// contributions [B, T, H, width] of the layers asked for.
std::vector<Embedding> MakeEmbeddings(const Tensor& output, const std::vector<int64_t>& rows,
                                      const EmbeddingShaping& shaping,
                                      const std::map<int64_t, Tensor>& contributions,
                                      const std::vector<int64_t>& lengths);

}  // namespace attnserve::server
