// Simple self-attention, no projections: softmax(X Xᵀ · s) X with s = 1/sqrt(d) when scaled,
// else 1: the scaled dot-product attention of "Attention Is All You Need" (Vaswani et al.,
// 2017) with the inputs themselves as queries, keys and values. Optionally causal.
#pragma once

#include "absl/status/statusor.h"
#include "engine/padded_batch.h"

namespace attnserve {

// x: [B, T, d]; returns [B, T, d], zero on padding rows.
absl::StatusOr<Tensor> SimpleSelfAttention(const PaddedBatch& x, bool scaled, bool causal);

}  // namespace attnserve
