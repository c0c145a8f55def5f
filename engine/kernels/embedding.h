// Token embedding lookup and positional embeddings (sinusoidal and learned).
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "engine/quantized_weight.h"
#include "engine/tensor.h"

namespace attnserve {

// out[i] = table[ids[i]]; out: [ids.size(), dim]. An id outside the table is an error naming it.
absl::Status EmbedTokens(const Tensor& table, std::span<const int64_t> ids, Tensor& out);
// The same from an int8 table, each row dequantized.
absl::Status EmbedTokens(const QuantizedWeight& table, std::span<const int64_t> ids, Tensor& out);

// The Vaswani et al. table: PE[p, 2i] = sin(p / 10000^(2i/dim)), PE[p, 2i+1] = cos(same angle).
Tensor SinusoidalPositions(int64_t positions, int64_t dim);

// x[b, t] += table[start + t] for t < lengths[b]; x: [batch, time, dim], table: [positions, dim]
// (sinusoidal or learned). Positions past the table's end are an error.
absl::Status AddPositions(const Tensor& table, std::span<const int64_t> lengths, int64_t start,
                          Tensor& x);

}  // namespace attnserve
