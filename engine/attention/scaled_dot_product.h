// The multi-head softmax attention core over already projected heads:
//   out_h = softmax(scale · Q_h K_g(h)ᵀ + mask + ALiBi) V_g(h)
// where g(h) = h / (H / Hkv) is the key/value head that query head h shares with its group
// (grouped-query attention; Hkv = H is multi-head, Hkv = 1 multi-query attention).
// Queries of a sequence with q_len queries and k_len keys sit at key positions
// k_len - q_len + i, so causal masking covers self-attention (q_len = k_len) and decoding
// against a cache (q_len < k_len) alike. Keys at or past k_len are never read, nor keys before a
// sliding window.
#pragma once

#include <cstdint>
#include <span>

#include "engine/f16.h"
#include "engine/tensor.h"

namespace attnserve {

// Keys or values of one sequence in blocks of block_rows rows (a paged cache; the last block may
// be partly used): row j at blocks[j / block_rows] + (j % block_rows) · stride. A dense tensor
// is a single block. Elements are float, half (KvCacheType::kF16) or bfloat16 bits (kBf16).
template <typename T>
struct RowBlocksOf {
  const T* const* blocks;
  int64_t block_rows;
  int64_t stride;

  const T* row(int64_t j) const { return blocks[j / block_rows] + (j % block_rows) * stride; }
};
using RowBlocks = RowBlocksOf<float>;
using HalfRowBlocks = RowBlocksOf<Half>;
using Bf16RowBlocks = RowBlocksOf<uint16_t>;

struct ScoreOptions {
  float scale = 1.0f;
  bool causal = false;
  std::span<const float> alibi_slopes;  // empty: no ALiBi; else one slope per head
  int64_t kv_heads = 0;                 // key/value heads; 0: one per query head
  int64_t window = 0;  // causal only: query at position p sees keys (p - window, p]; 0: all
};

// q: [B, Tq, H·dk], k: [B, Tk, Hkv·dk], v: [B, Tk, Hkv·dv], out: [B, Tq, H·dv]; dense rows, any
// row strides. Callers validate shapes; rows of out past q_lengths[b] are zeroed. Requires
// k_lengths[b] >= 1 where q_lengths[b] >= 1, and k_lengths[b] >= q_lengths[b] when causal.
void ScaledDotProductAttention(const Tensor& q, std::span<const int64_t> q_lengths, const Tensor& k,
                               const Tensor& v, std::span<const int64_t> k_lengths,
                               int64_t num_heads, const ScoreOptions& options, Tensor& out);
// The same with each sequence's keys and values in blocks: keys[b], values[b].
void ScaledDotProductAttention(const Tensor& q, std::span<const int64_t> q_lengths,
                               std::span<const RowBlocks> keys, std::span<const RowBlocks> values,
                               std::span<const int64_t> k_lengths, int64_t num_heads,
                               const ScoreOptions& options, Tensor& out);
void ScaledDotProductAttention(const Tensor& q, std::span<const int64_t> q_lengths,
                               std::span<const HalfRowBlocks> keys,
                               std::span<const HalfRowBlocks> values,
                               std::span<const int64_t> k_lengths, int64_t num_heads,
                               const ScoreOptions& options, Tensor& out);
void ScaledDotProductAttention(const Tensor& q, std::span<const int64_t> q_lengths,
                               std::span<const Bf16RowBlocks> keys,
                               std::span<const Bf16RowBlocks> values,
                               std::span<const int64_t> k_lengths, int64_t num_heads,
                               const ScoreOptions& options, Tensor& out);

}  // namespace attnserve
