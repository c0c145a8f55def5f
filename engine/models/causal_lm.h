// Decoder-only language model: input embedding, causal blocks (layers.N), final_norm for
// pre-norm stacks, and an LM head (lm_head.weight, or embed_tokens.weight when tied).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/blocks/norm.h"
#include "engine/blocks/transformer_block.h"
#include "engine/models/input_embedding.h"

namespace attnserve {

// One sequence's decoding state: a cache per layer and the number of tokens seen.
struct DecoderState {
  std::vector<LayerCache> layers;
  int64_t position = 0;
};

class CausalLM {
 public:
  static absl::StatusOr<std::unique_ptr<CausalLM>> Load(const ModelConfig& config,
                                                        WeightReader& weights);

  // Logits [B, T, vocab] at every position of every sequence, in one pass (zero on padding).
  absl::StatusOr<Tensor> Logits(const TokenSequences& sequences) const;

  // A fresh state with room for `capacity` tokens (at most max_positions when positions are
  // embedded): caches are allocated here, once.
  std::unique_ptr<DecoderState> NewState(int64_t capacity) const;
  // Feeds tokens[b] (a prompt, or the next token) to states[b], all sequences in one batch.
  // Returns the logits after each sequence's last fed token, [B, vocab]. On error no state
  // changes.
  absl::StatusOr<Tensor> Advance(std::span<DecoderState* const> states,
                                 const TokenSequences& tokens) const;

  const ModelConfig& config() const { return config_; }

 private:
  absl::StatusOr<Tensor> RunLayers(PaddedBatch x, std::span<DecoderState* const> states) const;

  ModelConfig config_;
  InputEmbedding embedding_;
  std::vector<TransformerBlock> layers_;
  std::optional<Norm> final_norm_;
  Tensor lm_head_;  // [vocab, dim]
};

}  // namespace attnserve
