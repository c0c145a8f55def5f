// Simple self-attention, no projections: softmax(X Xᵀ · s) X with s = 1/sqrt(d) when scaled,
// else 1 (see ../shared/seeds/002_* and 003_*). Optionally causal.
#pragma once

#include "absl/status/statusor.h"
#include "engine/padded_batch.h"

namespace attnserve {

// x: [B, T, d]; returns [B, T, d], zero on padding rows.
absl::StatusOr<Tensor> SimpleSelfAttention(const PaddedBatch& x, bool scaled, bool causal);

}  // namespace attnserve
