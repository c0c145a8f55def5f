// Configuration and weights of a multi-head attention layer, shared by its softmax, exclusive
// (XSA) and linear kernels. Tensor names follow the PyTorch reference module
// (python/attnserve/attention.py), so loaders and error messages use the same words.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/activations.h"
#include "engine/kernels/rotary.h"
#include "engine/tensor.h"

namespace attnserve {

enum class AttentionKind {
  kSoftmax,    // scaled dot-product attention (Vaswani et al. 2017)
  kExclusive,  // XSA: softmax attention minus each token's own value direction
  kLinear,     // softmax-free kernelized attention (Katharopoulos et al. 2020)
};

struct AttentionConfig {
  AttentionKind kind = AttentionKind::kSoftmax;
  int64_t model_dim = 0;   // width of the query input
  int64_t memory_dim = 0;  // width of the key/value input for cross-attention; 0 = self-attention
  int64_t num_heads = 1;
  int64_t num_kv_heads = 0;  // key/value heads (grouped-query attention); 0 = num_heads
  int64_t head_dim_qk = 0;   // per-head query/key width
  int64_t head_dim_v = 0;    // per-head value width
  int64_t output_dim = 0;    // rows of W_O; 0 = model_dim
  bool causal = false;
  bool alibi = false;
  RotaryConfig rotary;  // self-attention with softmax or exclusive attention only
  int64_t window = 0;   // causal sliding window: each query sees its last `window` keys; 0 = all
  float scale = 0.0f;   // 0 = 1/sqrt(head_dim_qk); softmax kinds only
  FeatureMap feature_map = FeatureMap::kEluPlusOne;  // linear kind only

  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  // Query heads that share each key/value head.
  int64_t group_size() const { return num_heads / kv_heads(); }
  // Row widths of the projections: queries H·dk, keys Hkv·dk, values Hkv·dv, and the heads'
  // concatenated outputs H·dv.
  int64_t query_width() const { return num_heads * head_dim_qk; }
  int64_t key_width() const { return kv_heads() * head_dim_qk; }
  int64_t value_width() const { return kv_heads() * head_dim_v; }
  int64_t heads_width() const { return num_heads * head_dim_v; }
  bool is_cross() const { return memory_dim > 0; }
  int64_t key_input_dim() const { return is_cross() ? memory_dim : model_dim; }
  int64_t out_dim() const { return output_dim > 0 ? output_dim : model_dim; }
  float score_scale() const;
};

// Biases may be empty (a projection without bias).
struct AttentionWeights {
  Tensor q_weight, q_bias;      // q_proj: [H·dk, model_dim], [H·dk]
  Tensor k_weight, k_bias;      // k_proj: [Hkv·dk, key_input_dim], [Hkv·dk]
  Tensor v_weight, v_bias;      // v_proj: [Hkv·dv, key_input_dim], [Hkv·dv]
  Tensor out_weight, out_bias;  // out_proj: [out_dim, H·dv], [out_dim]
};

// Names the first inconsistent field or tensor (e.g. "k_proj.weight has shape [8, 5], expected
// [8, 4]").
absl::Status CheckAttentionConfig(const AttentionConfig& config);
absl::Status CheckAttentionWeights(const AttentionConfig& config, const AttentionWeights& weights);

}  // namespace attnserve
