// Linear attention (Katharopoulos et al. 2020): softmax(QKᵀ)V replaced by a feature map φ,
//   out_i = φ(q_i)ᵀ S / (φ(q_i) · z + ε),  S = Σ_j φ(k_j) v_jᵀ,  z = Σ_j φ(k_j).
// Non-causal sums run over the whole sequence; the causal form is a recurrence that adds one key
// to (S, z) per token, so a new token costs O(dk·dv) whatever the context length.
// Feature maps: elu(x)+1 (Katharopoulos et al.) or exp(x) (Shen et al. 2021). No score scale:
// the papers apply φ to the raw projections.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kernels/activations.h"
#include "engine/tensor.h"

namespace attnserve {

inline constexpr float kLinearAttentionEpsilon = 1e-6f;

// The running (S, z) of one sequence, every key/value head (each shared by its group of query
// heads): what a causal decoder keeps instead of a key/value cache.
class LinearAttentionState {
 public:
  LinearAttentionState(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim_qk,
                       int64_t head_dim_v);

  // Adds φ(k_h) v_hᵀ to S_h and φ(k_h) to z_h; feature_k is φ(k_h) (length dk), value is v_h.
  void AddKey(int64_t head, const float* feature_k, const float* value);
  // out_h = φ(q_h)ᵀ S_h / (φ(q_h) · z_h + ε); feature_q is φ(q_h).
  void Read(int64_t head, const float* feature_q, float* out) const;

  // All heads for one token: k, v, q are rows [Hkv·dk], [Hkv·dv], [H·dk] before the feature map.
  void Step(const float* k, const float* v, const float* q, FeatureMap map, float* out);

  void Reset();
  int64_t tokens() const { return tokens_; }

 private:
  int64_t num_heads_, kv_heads_, dk_, dv_;
  int64_t tokens_ = 0;
  std::vector<float> kv_;          // S: [H][dk][dv]
  std::vector<float> normalizer_;  // z: [H][dk]
  std::vector<float> feature_;     // Step's scratch for φ(k) and φ(q): [dk]
};

// q: [B, Tq, H·dk], k: [B, Tk, Hkv·dk], v: [B, Tk, Hkv·dv], out: [B, Tq, H·dv], query head h
// reading key/value head h / (H / Hkv). Causal: query i sees
// keys up to its position k_len - q_len + i (requires k_len >= q_len). Padding rows of out are
// zeroed.
void LinearAttention(const Tensor& q, std::span<const int64_t> q_lengths, const Tensor& k,
                     const Tensor& v, std::span<const int64_t> k_lengths, int64_t num_heads,
                     int64_t num_kv_heads, FeatureMap feature_map, bool causal, Tensor& out);

}  // namespace attnserve
