// Exclusive self-attention (XSA): after softmax attention, each token's head output y loses its
// component along the token's own value vector, z = y - (y · v̂) v̂ with v̂ = v / ||v||, so
// attention carries only what the token does not already have ("Exclusive Self Attention",
// Zhai, 2026, Algorithm 1).
#pragma once

#include <cstdint>
#include <span>

#include "engine/tensor.h"

namespace attnserve {

// heads: [B, Tq, H·dv] softmax-attention outputs, modified in place; v: [B, Tk, Hkv·dv], query
// head h's values in key/value head h / (H / Hkv). Query i of sequence b is token
// k_len - q_len + i, whose own value row it removes.
void RemoveOwnValueComponent(Tensor& heads, const Tensor& v, std::span<const int64_t> q_lengths,
                             std::span<const int64_t> k_lengths, int64_t num_heads,
                             int64_t num_kv_heads);

}  // namespace attnserve
