#include "engine/attention/linear.h"

#include <algorithm>

#include "engine/kernels/vector_ops.h"
#include "engine/parallel.h"

namespace attnserve {

LinearAttentionState::LinearAttentionState(int64_t num_heads, int64_t num_kv_heads,
                                           int64_t head_dim_qk, int64_t head_dim_v)
    : num_heads_(num_heads),
      kv_heads_(num_kv_heads),
      dk_(head_dim_qk),
      dv_(head_dim_v),
      kv_(num_kv_heads * head_dim_qk * head_dim_v, 0.0f),
      normalizer_(num_kv_heads * head_dim_qk, 0.0f),
      feature_(head_dim_qk) {}

void LinearAttentionState::AddKey(int64_t head, const float* feature_k, const float* value) {
  float* s = kv_.data() + head * dk_ * dv_;
  float* z = normalizer_.data() + head * dk_;
  for (int64_t d = 0; d < dk_; ++d) {
    vec::Axpy(feature_k[d], value, s + d * dv_, dv_);
    z[d] += feature_k[d];
  }
}

void LinearAttentionState::Read(int64_t head, const float* feature_q, float* out) const {
  const float* s = kv_.data() + head * dk_ * dv_;
  const float* z = normalizer_.data() + head * dk_;
  std::fill(out, out + dv_, 0.0f);
  for (int64_t d = 0; d < dk_; ++d) vec::Axpy(feature_q[d], s + d * dv_, out, dv_);
  vec::Scale(out, dv_, 1.0f / (vec::Dot(feature_q, z, dk_) + kLinearAttentionEpsilon));
}

void LinearAttentionState::Step(const float* k, const float* v, const float* q, FeatureMap map,
                                float* out) {
  for (int64_t h = 0; h < kv_heads_; ++h) {
    std::copy(k + h * dk_, k + (h + 1) * dk_, feature_.begin());
    ApplyFeatureMap(map, feature_.data(), dk_);
    AddKey(h, feature_.data(), v + h * dv_);
  }
  const int64_t group = num_heads_ / kv_heads_;
  for (int64_t h = 0; h < num_heads_; ++h) {
    std::copy(q + h * dk_, q + (h + 1) * dk_, feature_.begin());
    ApplyFeatureMap(map, feature_.data(), dk_);
    Read(h / group, feature_.data(), out + h * dv_);
  }
  ++tokens_;
}

void LinearAttentionState::Reset() {
  std::fill(kv_.begin(), kv_.end(), 0.0f);
  std::fill(normalizer_.begin(), normalizer_.end(), 0.0f);
  tokens_ = 0;
}

void LinearAttention(const Tensor& q, std::span<const int64_t> q_lengths, const Tensor& k,
                     const Tensor& v, std::span<const int64_t> k_lengths, int64_t num_heads,
                     int64_t num_kv_heads, FeatureMap feature_map, bool causal, Tensor& out) {
  const int64_t batch = q.dim(0);
  const int64_t dk = q.dim(2) / num_heads, dv = out.dim(2) / num_heads;
  const int64_t group = num_heads / num_kv_heads;
  ParallelFor(
      batch * num_heads,
      [&](int64_t index) {
        const int64_t b = index / num_heads, h = index % num_heads, kv = h / group;
        // One head of one sequence: a single-head state is all it needs.
        LinearAttentionState state(1, 1, dk, dv);
        std::vector<float> feature(dk);
        const int64_t q_len = q_lengths[b], k_len = k_lengths[b];
        int64_t keys_added = 0;
        auto add_keys_through = [&](int64_t last) {
          for (; keys_added <= last; ++keys_added) {
            const float* key = k.data() + b * k.stride(0) + keys_added * k.stride(1) + kv * dk;
            std::copy(key, key + dk, feature.begin());
            ApplyFeatureMap(feature_map, feature.data(), dk);
            state.AddKey(0, feature.data(),
                         v.data() + b * v.stride(0) + keys_added * v.stride(1) + kv * dv);
          }
        };
        if (!causal) add_keys_through(k_len - 1);
        for (int64_t i = 0; i < out.dim(1); ++i) {
          float* o = out.data() + b * out.stride(0) + i * out.stride(1) + h * dv;
          if (i >= q_len) {
            std::fill(o, o + dv, 0.0f);
            continue;
          }
          if (causal) add_keys_through(k_len - q_len + i);
          const float* query = q.data() + b * q.stride(0) + i * q.stride(1) + h * dk;
          std::copy(query, query + dk, feature.begin());
          ApplyFeatureMap(feature_map, feature.data(), dk);
          state.Read(0, feature.data(), o);
        }
      },
      Schedule::kDynamic);
}

}  // namespace attnserve
