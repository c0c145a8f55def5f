#include "engine/attention/multi_head.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/attention/exclusive.h"
#include "engine/attention/linear.h"
#include "engine/attention/scaled_dot_product.h"
#include "engine/kernels/alibi.h"
#include "engine/matmul.h"

namespace attnserve {
namespace {

// The weights stacked by rows into one [Σ rows, cols] matrix; biases likewise, zero where a part
// has none (empty when no part has one).
void Stack(const std::vector<const Tensor*>& weights, const std::vector<const Tensor*>& biases,
           Tensor& stacked_weight, Tensor& stacked_bias) {
  int64_t rows = 0;
  for (const Tensor* w : weights) rows += w->dim(0);
  const int64_t cols = weights[0]->dim(1);
  stacked_weight = Tensor({rows, cols});
  const bool any_bias =
      std::any_of(biases.begin(), biases.end(), [](const Tensor* b) { return !b->empty(); });
  if (any_bias) stacked_bias = Tensor::Zeros({rows});
  int64_t row = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    std::memcpy(stacked_weight.row(row), weights[i]->data(), weights[i]->size() * sizeof(float));
    if (!biases[i]->empty()) {
      std::memcpy(stacked_bias.data() + row, biases[i]->data(), biases[i]->size() * sizeof(float));
    }
    row += weights[i]->dim(0);
  }
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(const AttentionConfig& config, AttentionWeights weights)
    : config_(config), weights_(std::move(weights)) {}

absl::StatusOr<MultiHeadAttention> MultiHeadAttention::Create(const AttentionConfig& config,
                                                              AttentionWeights weights) {
  if (auto status = CheckAttentionWeights(config, weights); !status.ok()) return status;
  MultiHeadAttention layer(config, std::move(weights));
  const AttentionWeights& w = layer.weights_;
  if (config.is_cross()) {
    Stack({&w.k_weight, &w.v_weight}, {&w.k_bias, &w.v_bias}, layer.fused_weight_,
          layer.fused_bias_);
  } else {
    Stack({&w.q_weight, &w.k_weight, &w.v_weight}, {&w.q_bias, &w.k_bias, &w.v_bias},
          layer.fused_weight_, layer.fused_bias_);
  }
  if (config.alibi) layer.alibi_slopes_ = AlibiSlopes(static_cast<int>(config.num_heads));
  return layer;
}

absl::Status MultiHeadAttention::CheckInputs(const PaddedBatch& x,
                                             const PaddedBatch* memory) const {
  if (auto status = CheckPaddedBatch("attention input", x, config_.model_dim); !status.ok()) {
    return status;
  }
  if (!config_.is_cross()) {
    if (memory != nullptr) {
      return absl::InvalidArgumentError("self-attention layer was given a memory");
    }
    return absl::OkStatus();
  }
  if (memory == nullptr) return absl::InvalidArgumentError("cross-attention needs a memory");
  if (auto status = CheckPaddedBatch("attention memory", *memory, config_.memory_dim);
      !status.ok()) {
    return status;
  }
  if (memory->batch() != x.batch()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention memory has batch ", memory->batch(), ", input has ", x.batch()));
  }
  for (int64_t b = 0; b < x.batch(); ++b) {
    const int64_t q_len = x.lengths[b], k_len = memory->lengths[b];
    if (q_len > 0 && k_len == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", b, " has queries but an empty attention memory"));
    }
    if (config_.causal && k_len < q_len) {
      return absl::InvalidArgumentError(absl::StrCat("causal attention: sequence ", b, " has ",
                                                     q_len, " queries but only ", k_len, " keys"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MultiHeadAttention::Forward(const PaddedBatch& x, const PaddedBatch* memory,
                                                   Tensor* head_outputs) const {
  if (auto status = CheckInputs(x, memory); !status.ok()) return status;
  const int64_t heads = config_.num_heads;
  const int64_t qk_width = heads * config_.head_dim_qk, v_width = heads * config_.head_dim_v;

  Tensor q, k, v;
  const std::vector<int64_t>& k_lengths = config_.is_cross() ? memory->lengths : x.lengths;
  if (config_.is_cross()) {
    auto projected_q = LinearRows(x.values, weights_.q_weight, weights_.q_bias);
    if (!projected_q.ok()) return projected_q.status();
    auto kv = LinearRows(memory->values, fused_weight_, fused_bias_);
    if (!kv.ok()) return kv.status();
    q = *std::move(projected_q);
    k = kv->Slice(2, 0, qk_width);
    v = kv->Slice(2, qk_width, v_width);
  } else {
    auto qkv = LinearRows(x.values, fused_weight_, fused_bias_);
    if (!qkv.ok()) return qkv.status();
    q = qkv->Slice(2, 0, qk_width);
    k = qkv->Slice(2, qk_width, qk_width);
    v = qkv->Slice(2, 2 * qk_width, v_width);
  }

  Tensor concatenated({x.batch(), x.time(), v_width});
  switch (config_.kind) {
    case AttentionKind::kSoftmax:
    case AttentionKind::kExclusive:
      ScaledDotProductAttention(q, x.lengths, k, v, k_lengths, heads,
                                {config_.score_scale(), config_.causal, alibi_slopes_},
                                concatenated);
      if (config_.kind == AttentionKind::kExclusive) {
        RemoveOwnValueComponent(concatenated, v, x.lengths, k_lengths, heads);
      }
      break;
    case AttentionKind::kLinear:
      LinearAttention(q, x.lengths, k, v, k_lengths, heads, config_.feature_map, config_.causal,
                      concatenated);
      break;
  }

  auto output = LinearRows(concatenated, weights_.out_weight, weights_.out_bias);
  if (!output.ok()) return output.status();
  ZeroPadding(*output, x.lengths);
  if (head_outputs != nullptr) *head_outputs = std::move(concatenated);
  return output;
}

}  // namespace attnserve
