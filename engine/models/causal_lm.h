// Decoder-only language model: input embedding, causal blocks (layers.N), final_norm for
// pre-norm stacks, and an LM head (lm_head.weight, or embed_tokens.weight when tied).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/models/input_embedding.h"
#include "engine/models/layer_stack.h"

namespace attnserve {

// One sequence's decoding state: a cache per layer and the number of tokens seen.
struct DecoderState {
  std::vector<LayerCache> layers;
  int64_t position = 0;
};

// Per layer, the caches of every sequence in a batch: the shape LayerStack::Forward takes.
std::vector<std::vector<LayerCache*>> CachesByLayer(std::span<DecoderState* const> states,
                                                    size_t layers);
// Refuses feeding tokens[b] to states[b] when it would overflow the cache.
absl::Status CheckRoomFor(std::span<DecoderState* const> states, const TokenSequences& tokens);

class CausalLM {
 public:
  static absl::StatusOr<std::unique_ptr<CausalLM>> Load(const ModelConfig& config,
                                                        WeightReader& weights);

  // Logits [B, T, vocab] at every position of every sequence, in one pass (zero on padding).
  absl::StatusOr<Tensor> Logits(const TokenSequences& sequences) const;

  // A fresh state with room for `capacity` tokens (at most max_positions, the model's
  // maximum context): caches are allocated here, once.
  std::unique_ptr<DecoderState> NewState(int64_t capacity) const;
  // Feeds tokens[b] (a prompt, or the next token) to states[b], all sequences in one batch.
  // Returns the logits after each sequence's last fed token, [B, vocab]. On error no state
  // changes.
  absl::StatusOr<Tensor> Advance(std::span<DecoderState* const> states,
                                 const TokenSequences& tokens) const;

  const ModelConfig& config() const { return config_; }

 private:
  ModelConfig config_;
  InputEmbedding embedding_;
  std::optional<LayerStack> stack_;
  Tensor lm_head_;  // [vocab, dim]
};

}  // namespace attnserve
