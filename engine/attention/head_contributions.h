// Per-head contributions: multi-head attention's output is Σ_h z_h W_O[h]ᵀ + b, where z_h is
// head h's output and W_O[h] the columns of W_O that read it. Each term o_h = z_h W_O[h]ᵀ is
// the head's own model-space embedding: W_O of "Attention Is All You Need" (Vaswani et al.,
// 2017) split by head, as "A Mathematical Framework for Transformer Circuits" (Elhage et al.,
// 2021) reads it.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/tensor.h"

namespace attnserve {

// head_outputs: [B, T, H·dv] (as MultiHeadAttention::Forward returns them); out_weight:
// [D, H·dv]. Returns [B, T, H, D]; summed over H plus the output bias, it is the layer output.
absl::StatusOr<Tensor> HeadContributions(const Tensor& head_outputs, const Tensor& out_weight,
                                         int64_t num_heads);

}  // namespace attnserve
