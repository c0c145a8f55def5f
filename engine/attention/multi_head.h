// A multi-head attention layer: projections, one of the attention kernels, concatenation of the
// heads and W_O. Self-attention (keys and values from x) or cross-attention (from a memory).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/attention/attention_config.h"
#include "engine/attention/kv_cache.h"
#include "engine/kernels/rotary.h"
#include "engine/matmul.h"
#include "engine/padded_batch.h"

namespace attnserve {

// Projected keys and values of a cross-attention memory: computed once per memory (an encoded
// source, a Perceiver input) and reused by every query pass over it.
struct KeyValues {
  Tensor keys;    // [B, Tk, Hkv·dk]
  Tensor values;  // [B, Tk, Hkv·dv]
  std::vector<int64_t> lengths;
};

class MultiHeadAttention {
 public:
  // Validates the config and every weight's shape; fuses the projections that share an input
  // into one matmul; keeps the projections in `format`.
  static absl::StatusOr<MultiHeadAttention> Create(const AttentionConfig& config,
                                                   AttentionWeights weights,
                                                   const WeightFormat& format = {});

  // x: [B, Tq, model_dim]; memory: [B, Tk, memory_dim] for cross-attention, else null.
  // Returns [B, Tq, out_dim], zero on padding rows. head_outputs, when given, receives the
  // concatenated heads before W_O, [B, Tq, H·dv] (see HeadContributions).
  absl::StatusOr<Tensor> Forward(const PaddedBatch& x, const PaddedBatch* memory = nullptr,
                                 Tensor* head_outputs = nullptr) const;

  // Cross-attention in two steps: project a memory once, then attend to it any number of times.
  absl::StatusOr<KeyValues> ProjectMemory(const PaddedBatch& memory) const;
  absl::StatusOr<Tensor> Attend(const PaddedBatch& x, const KeyValues& memory,
                                Tensor* head_outputs = nullptr) const;

  // Causal self-attention that continues each sequence from its cache: x holds the new tokens
  // (a prompt, or one token per sequence when decoding), caches[b] what sequence b saw before
  // (its length is the position of the first new token, for rotary positions).
  // The new keys and values are appended; nothing is modified when an error is returned.
  absl::StatusOr<Tensor> ForwardCached(const PaddedBatch& x,
                                       std::span<LayerCache* const> caches) const;
  // An empty cache for ForwardCached: layer `layer`'s rows in the table's blocks (softmax and
  // exclusive attention), or a recurrent state (linear attention).
  LayerCache NewCache(const BlockTable* table, int64_t layer) const;
  // The key and value widths a block pool needs for this layer; nullopt for linear attention,
  // which keeps no keys.
  std::optional<KvBlockShape> CacheShape() const;

  const AttentionConfig& config() const { return config_; }
  // out_proj's weight [out_dim, H·dv] (a copy where it was packed).
  Tensor OutputWeight() const { return output_.PlainWeight(); }

 private:
  explicit MultiHeadAttention(const AttentionConfig& config);
  ScoreOptions score_options() const;
  // Rotates the query and key columns of projected [q | k | v] rows in place, sequence b's first
  // row at position starts[b] (no-op without rotary positions).
  void Rotate(Tensor& qkv, const std::vector<int64_t>& lengths,
              const std::vector<int64_t>& starts) const;
  absl::Status CheckInputs(const PaddedBatch& x, const PaddedBatch* memory) const;
  absl::Status CheckMemoryLengths(const PaddedBatch& x,
                                  const std::vector<int64_t>& k_lengths) const;
  // Softmax, exclusive or linear attention of projected q over k, v into `concatenated`
  // [B, Tq, H·dv] (a view is fine: rows past q_lengths are zeroed).
  void AttendProjected(const Tensor& q, const std::vector<int64_t>& q_lengths, const Tensor& k,
                       const Tensor& v, const std::vector<int64_t>& k_lengths,
                       Tensor& concatenated) const;
  absl::StatusOr<Tensor> ProjectOutput(Tensor concatenated, const std::vector<int64_t>& lengths,
                                       Tensor* head_outputs) const;

  AttentionConfig config_;
  // Self-attention: [q; k; v] stacked; cross-attention: [k; v] stacked (q stays separate), each
  // packed where that is faster, like the q (cross-attention) and output projections.
  LinearWeights fused_, query_, output_;
  std::vector<float> alibi_slopes_;
  std::optional<RotaryEmbedding> rotary_;
};

}  // namespace attnserve
