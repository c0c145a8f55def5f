// The input side every model shares: token ids through embed_tokens (or feature vectors through
// input_proj), plus sinusoidal or learned positions (embed_positions), then embed_norm if the
// config has one (BERT's). ALiBi, rotary and "none" add no position vectors (ALiBi lives in the
// attention scores, rotary positions in the queries and keys).
#pragma once

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/blocks/norm.h"
#include "engine/importers/model_config.h"
#include "engine/importers/weight_reader.h"
#include "engine/padded_batch.h"

namespace attnserve {

using TokenSequences = std::vector<std::vector<int64_t>>;

// A batch of model inputs: token ids, or feature vectors for models with input_dim.
struct ModelInputs {
  TokenSequences tokens;
  PaddedBatch features;
  // Per token of `tokens`, its type (a pair's segment, as the tokenizer gives it) for models
  // with token_types; empty: every token type 0.
  std::vector<std::vector<uint8_t>> token_types = {};
};

// The most tokens in one of the sequences: the time axis of their padded batch.
int64_t LongestSequence(const TokenSequences& sequences);
// The tokens of all the sequences together.
int64_t TokenCount(const TokenSequences& sequences);

class InputEmbedding {
 public:
  static absl::StatusOr<InputEmbedding> Load(WeightReader& weights, const ModelConfig& config);

  // Token ids to a padded batch [B, T, dim]; sequence b's first token is at position starts[b]
  // (empty: all 0). Ids outside the vocabulary and positions past max_positions are refused.
  absl::StatusOr<PaddedBatch> EmbedTokens(
      const TokenSequences& sequences, const std::vector<int64_t>& starts = {},
      const std::vector<std::vector<uint8_t>>& token_types = {}) const;
  // Feature vectors [B, T, input_dim] to [B, T, dim].
  absl::StatusOr<PaddedBatch> EmbedFeatures(const PaddedBatch& features) const;

  // The token embedding table [vocab, dim] (an LM head may be tied to it): float, or int8
  // when the weights are (WeightReader::format), one of the two.
  const Tensor& token_table() const { return tokens_; }
  const QuantizedWeight& quantized_token_table() const { return quantized_tokens_; }

 private:
  // Adds each token's type row to sequence b's `rows` (type 0 without token_types).
  absl::Status AddTokenTypes(size_t b, const std::vector<std::vector<uint8_t>>& token_types,
                             Tensor& rows) const;
  // Adds the positions and applies embed_norm.
  absl::Status Finish(const std::vector<int64_t>& starts, PaddedBatch& x) const;

  int64_t dim_ = 0;
  int64_t max_positions_ = 0;
  Tensor tokens_;  // embed_tokens.weight
  QuantizedWeight quantized_tokens_;
  LinearWeights input_proj_;
  Tensor positions_;  // learned or sinusoidal table; empty for alibi / none
  Tensor types_;      // embed_token_types [token_types, dim]; empty for none
  std::optional<Norm> norm_;
};

// The LM head [vocab, dim]: lm_head.weight, or the token embedding when tie_embeddings (then it
// shares the embedding's table, float or int8). A float head is not packed: a tied one would be
// a second copy of the table.
absl::StatusOr<LinearWeights> LoadLmHead(WeightReader& weights, const ModelConfig& config,
                                         const InputEmbedding& embedding);

}  // namespace attnserve
