// Pointer attention (Vinyals et al. 2015): for each query (decoder state d_i) a distribution over
// the positions of a memory (encoder states e_j),
//   u_ij = vᵀ tanh(W1 e_j + W2 d_i),   output_i = log_softmax_j(u_ij) over valid j.
#pragma once

#include "absl/status/statusor.h"
#include "engine/padded_batch.h"

namespace attnserve {

// Names as in the PyTorch reference module.
struct PointerAttentionWeights {
  Tensor memory_weight;  // memory_proj.weight (W1): [A, memory_dim]
  Tensor query_weight;   // query_proj.weight (W2): [A, query_dim]
  Tensor score_weight;   // score.weight (vᵀ): [1, A]
};

class PointerAttention {
 public:
  static absl::StatusOr<PointerAttention> Create(PointerAttentionWeights weights);

  // queries: [B, Tq, query_dim], memory: [B, Tm, memory_dim]. Returns log-probabilities
  // [B, Tq, Tm]: -inf at padded memory positions, 0 on padded query rows.
  absl::StatusOr<Tensor> Forward(const PaddedBatch& queries, const PaddedBatch& memory) const;

 private:
  explicit PointerAttention(PointerAttentionWeights weights) : weights_(std::move(weights)) {}
  PointerAttentionWeights weights_;
};

}  // namespace attnserve
