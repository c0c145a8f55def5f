// A multi-head attention layer: projections, one of the attention kernels, concatenation of the
// heads and W_O. Self-attention (keys and values from x) or cross-attention (from a memory).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/attention/attention_config.h"
#include "engine/padded_batch.h"

namespace attnserve {

class MultiHeadAttention {
 public:
  // Validates the config and every weight's shape; fuses the projections that share an input
  // into one matmul.
  static absl::StatusOr<MultiHeadAttention> Create(const AttentionConfig& config,
                                                   AttentionWeights weights);

  // x: [B, Tq, model_dim]; memory: [B, Tk, memory_dim] for cross-attention, else null.
  // Returns [B, Tq, out_dim], zero on padding rows. head_outputs, when given, receives the
  // concatenated heads before W_O, [B, Tq, H·dv] (see HeadContributions).
  absl::StatusOr<Tensor> Forward(const PaddedBatch& x, const PaddedBatch* memory = nullptr,
                                 Tensor* head_outputs = nullptr) const;

  const AttentionConfig& config() const { return config_; }
  const AttentionWeights& weights() const { return weights_; }

 private:
  MultiHeadAttention(const AttentionConfig& config, AttentionWeights weights);
  absl::Status CheckInputs(const PaddedBatch& x, const PaddedBatch* memory) const;

  AttentionConfig config_;
  AttentionWeights weights_;
  // Self-attention: [q; k; v] stacked; cross-attention: [k; v] stacked (q stays separate).
  Tensor fused_weight_, fused_bias_;
  std::vector<float> alibi_slopes_;
};

}  // namespace attnserve
