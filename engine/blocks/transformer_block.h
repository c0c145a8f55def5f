// The residual block every architecture is built from: up to three sublayers, each wrapped by
// its own norm, pre-norm (x + f(norm(x)), Xiong et al. 2020) or post-norm (norm(x + f(x)),
// Vaswani et al. 2017):
//   self_attn  (+ self_attn_norm)   self-attention, causal or not
//   cross_attn (+ cross_attn_norm)  attention to a memory
//   ffn        (+ ffn_norm)         position-wise feed-forward
// Encoder block: self + ffn. GPT-style decoder block: causal self + ffn. Vaswani decoder block:
// causal self + cross + ffn. Perceiver IO cross-attention block and Set Transformer MAB(X, Y):
// cross + ffn; SAB(X) = MAB(X, X) is the encoder block.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "engine/attention/multi_head.h"
#include "engine/blocks/feed_forward.h"
#include "engine/blocks/norm.h"
#include "engine/importers/model_config.h"
#include "engine/importers/weight_reader.h"

namespace attnserve {

struct BlockConfig {
  int64_t dim = 0;
  bool self_attention = true;
  bool causal = false;
  bool cross_attention = false;
  int64_t memory_dim = 0;  // 0: dim
  AttentionKind attention = AttentionKind::kSoftmax;
  FeatureMap feature_map = FeatureMap::kEluPlusOne;
  int64_t num_heads = 1, head_dim_qk = 0, head_dim_v = 0;
  int64_t num_kv_heads = 0;  // 0: num_heads
  bool alibi = false;
  float attention_scale = 0.0f;  // of the self-attention's scores; 0: 1/sqrt(head_dim_qk)
  RotaryConfig rotary;           // self-attention only
  int64_t window = 0;            // causal self-attention's sliding window; 0: none
  bool bias = true;
  NormKind norm = NormKind::kLayerNorm;
  float norm_eps = 1e-5f;
  bool pre_norm = true;
  int64_t ffn_dim = 0;
  Activation activation = Activation::kGeluErf;
  bool gated_ffn = false;

  FeedForwardConfig ffn() const { return {dim, ffn_dim, dim, bias, gated_ffn, activation}; }
};

// The block settings a model config implies for its layers.
BlockConfig BlockConfigFor(const ModelConfig& model);

class TransformerBlock {
 public:
  static absl::StatusOr<TransformerBlock> Load(WeightReader& weights, const std::string& prefix,
                                               const BlockConfig& config);

  // x: [B, T, dim]. memory: the cross-attention keys and values (from ProjectMemory) when the
  // block has cross-attention. caches: one per sequence to continue causal self-attention
  // from (empty: attend within x only). Returns the new [B, T, dim], zero on padding.
  // self_heads, when given, receives the self-attention's concatenated head outputs before
  // W_O, [B, T, H·dv] (see HeadContributions; only without caches).
  absl::StatusOr<Tensor> Forward(const PaddedBatch& x, const KeyValues* memory = nullptr,
                                 std::span<LayerCache* const> caches = {},
                                 Tensor* self_heads = nullptr) const;

  absl::StatusOr<KeyValues> ProjectMemory(const PaddedBatch& memory) const;
  LayerCache NewCache(const BlockTable* table, int64_t layer) const {
    return self_attn_->NewCache(table, layer);
  }
  // The self-attention layer (null in cross-attention-only blocks).
  const MultiHeadAttention* self_attention() const { return self_attn_ ? &*self_attn_ : nullptr; }
  const BlockConfig& config() const { return config_; }

 private:
  BlockConfig config_;
  std::optional<MultiHeadAttention> self_attn_, cross_attn_;
  std::optional<Norm> self_attn_norm_, cross_attn_norm_;
  FeedForward ffn_;
  Norm ffn_norm_;
};

}  // namespace attnserve
