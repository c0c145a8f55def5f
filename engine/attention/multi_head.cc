#include "engine/attention/multi_head.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/attention/exclusive.h"
#include "engine/attention/linear.h"
#include "engine/attention/scaled_dot_product.h"
#include "engine/kernels/alibi.h"
#include "engine/matmul.h"

namespace attnserve {

MultiHeadAttention::MultiHeadAttention(const AttentionConfig& config) : config_(config) {}

absl::StatusOr<MultiHeadAttention> MultiHeadAttention::Create(const AttentionConfig& config,
                                                              AttentionWeights weights,
                                                              const WeightFormat& format) {
  RETURN_IF_ERROR(CheckAttentionWeights(config, weights));
  MultiHeadAttention layer(config);
  const AttentionWeights& w = weights;
  const std::vector<const Tensor*> projections =
      config.is_cross() ? std::vector<const Tensor*>{&w.k_weight, &w.v_weight}
                        : std::vector<const Tensor*>{&w.q_weight, &w.k_weight, &w.v_weight};
  const std::vector<const Tensor*> biases =
      config.is_cross() ? std::vector<const Tensor*>{&w.k_bias, &w.v_bias}
                        : std::vector<const Tensor*>{&w.q_bias, &w.k_bias, &w.v_bias};
  layer.fused_ = PrepareStackedLinear(projections, biases, format);
  if (config.is_cross()) layer.query_ = PrepareLinear(w.q_weight, w.q_bias, format);
  layer.output_ = PrepareLinear(w.out_weight, w.out_bias, format);
  if (config.alibi) layer.alibi_slopes_ = AlibiSlopes(static_cast<int>(config.num_heads));
  if (config.rotary.enabled()) layer.rotary_.emplace(config.rotary);
  return layer;
}

absl::Status MultiHeadAttention::CheckInputs(const PaddedBatch& x,
                                             const PaddedBatch* memory) const {
  RETURN_IF_ERROR(CheckPaddedBatch("attention input", x, config_.model_dim));
  if (!config_.is_cross()) {
    if (memory != nullptr) {
      return absl::InvalidArgumentError("self-attention layer was given a memory");
    }
    return absl::OkStatus();
  }
  if (memory == nullptr) return absl::InvalidArgumentError("cross-attention needs a memory");
  return CheckPaddedBatch("attention memory", *memory, config_.memory_dim);
}

absl::Status MultiHeadAttention::CheckMemoryLengths(const PaddedBatch& x,
                                                    const std::vector<int64_t>& k_lengths) const {
  if (static_cast<int64_t>(k_lengths.size()) != x.batch()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention memory has batch ", k_lengths.size(), ", input has ", x.batch()));
  }
  for (int64_t b = 0; b < x.batch(); ++b) {
    const int64_t q_len = x.lengths[b], k_len = k_lengths[b];
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

void MultiHeadAttention::AttendProjected(const Tensor& q, const std::vector<int64_t>& q_lengths,
                                         const Tensor& k, const Tensor& v,
                                         const std::vector<int64_t>& k_lengths,
                                         Tensor& concatenated) const {
  const int64_t heads = config_.num_heads, kv_heads = config_.kv_heads();
  switch (config_.kind) {
    case AttentionKind::kSoftmax:
    case AttentionKind::kExclusive:
      ScaledDotProductAttention(q, q_lengths, k, v, k_lengths, heads, score_options(),
                                concatenated);
      if (config_.kind == AttentionKind::kExclusive) {
        RemoveOwnValueComponent(concatenated, v, q_lengths, k_lengths, heads, kv_heads);
      }
      break;
    case AttentionKind::kLinear:
      LinearAttention(q, q_lengths, k, v, k_lengths, heads, kv_heads, config_.feature_map,
                      config_.causal, concatenated);
      break;
  }
}

ScoreOptions MultiHeadAttention::score_options() const {
  return {config_.score_scale(), config_.causal, alibi_slopes_, config_.kv_heads(), config_.window};
}

void MultiHeadAttention::Rotate(Tensor& qkv, const std::vector<int64_t>& lengths,
                                const std::vector<int64_t>& starts) const {
  if (!rotary_) return;
  // The query heads and then the key heads lead each row, all head_dim_qk wide: one pass rotates
  // both, working out each position's angles once.
  const int64_t heads = config_.num_heads + config_.kv_heads();
  for (int64_t b = 0; b < qkv.dim(0); ++b) {
    rotary_->Apply(qkv.data() + b * qkv.stride(0), qkv.stride(1), lengths[b], heads,
                   config_.head_dim_qk, starts[b], starts[b] + lengths[b]);
  }
}

absl::StatusOr<Tensor> MultiHeadAttention::ProjectOutput(Tensor concatenated,
                                                         const std::vector<int64_t>& lengths,
                                                         Tensor* head_outputs) const {
  ASSIGN_OR_RETURN(Tensor output, LinearRows(concatenated, output_));
  ZeroPadding(output, lengths);
  if (head_outputs != nullptr) *head_outputs = std::move(concatenated);
  return output;
}

absl::StatusOr<Tensor> MultiHeadAttention::Forward(const PaddedBatch& x, const PaddedBatch* memory,
                                                   Tensor* head_outputs) const {
  RETURN_IF_ERROR(CheckInputs(x, memory));
  if (config_.is_cross()) {
    ASSIGN_OR_RETURN(KeyValues projected, ProjectMemory(*memory));
    return Attend(x, projected, head_outputs);
  }
  const AttentionConfig& c = config_;
  ASSIGN_OR_RETURN(Tensor qkv, LinearRows(x.values, fused_));
  std::vector<int64_t> starts(x.batch(), 0);
  Rotate(qkv, x.lengths, starts);
  Tensor concatenated({x.batch(), x.time(), c.heads_width()});
  AttendProjected(
      qkv.Slice(2, 0, c.query_width()), x.lengths, qkv.Slice(2, c.query_width(), c.key_width()),
      qkv.Slice(2, c.query_width() + c.key_width(), c.value_width()), x.lengths, concatenated);
  return ProjectOutput(std::move(concatenated), x.lengths, head_outputs);
}

absl::StatusOr<KeyValues> MultiHeadAttention::ProjectMemory(const PaddedBatch& memory) const {
  if (!config_.is_cross()) {
    return absl::FailedPreconditionError("ProjectMemory on a self-attention layer");
  }
  RETURN_IF_ERROR(CheckPaddedBatch("attention memory", memory, config_.memory_dim));
  ASSIGN_OR_RETURN(Tensor kv, LinearRows(memory.values, fused_));
  const AttentionConfig& c = config_;
  return KeyValues{kv.Slice(2, 0, c.key_width()), kv.Slice(2, c.key_width(), c.value_width()),
                   memory.lengths};
}

absl::StatusOr<Tensor> MultiHeadAttention::Attend(const PaddedBatch& x, const KeyValues& memory,
                                                  Tensor* head_outputs) const {
  if (!config_.is_cross()) {
    return absl::FailedPreconditionError("Attend on a self-attention layer");
  }
  RETURN_IF_ERROR(CheckPaddedBatch("attention input", x, config_.model_dim));
  RETURN_IF_ERROR(CheckMemoryLengths(x, memory.lengths));
  ASSIGN_OR_RETURN(Tensor q, LinearRows(x.values, query_));
  Tensor concatenated({x.batch(), x.time(), config_.heads_width()});
  AttendProjected(q, x.lengths, memory.keys, memory.values, memory.lengths, concatenated);
  return ProjectOutput(std::move(concatenated), x.lengths, head_outputs);
}

LayerCache MultiHeadAttention::NewCache(const BlockTable* table, int64_t layer) const {
  if (config_.kind == AttentionKind::kLinear) {
    return LayerCache(LinearAttentionState(config_.num_heads, config_.kv_heads(),
                                           config_.head_dim_qk, config_.head_dim_v));
  }
  return LayerCache(table, layer);
}

std::optional<KvBlockShape> MultiHeadAttention::CacheShape() const {
  if (config_.kind == AttentionKind::kLinear) return std::nullopt;
  KvBlockShape shape;
  shape.layers = 1;
  shape.key_width = config_.key_width();
  shape.value_width = config_.value_width();
  return shape;
}

absl::StatusOr<Tensor> MultiHeadAttention::ForwardCached(
    const PaddedBatch& x, std::span<LayerCache* const> caches) const {
  if (config_.is_cross() || !config_.causal) {
    return absl::FailedPreconditionError("ForwardCached needs causal self-attention");
  }
  RETURN_IF_ERROR(CheckPaddedBatch("attention input", x, config_.model_dim));
  if (static_cast<int64_t>(caches.size()) != x.batch()) {
    return absl::InvalidArgumentError(
        absl::StrCat(caches.size(), " caches for a batch of ", x.batch()));
  }
  // Check every sequence before touching any cache, so an error leaves them all as they were.
  for (int64_t b = 0; b < x.batch(); ++b) {
    if (caches[b]->length() > caches[b]->capacity() - x.lengths[b]) {
      return absl::OutOfRangeError(
          absl::StrCat("sequence ", b, " would reach ", caches[b]->length() + x.lengths[b],
                       " tokens, beyond its cache of ", caches[b]->capacity()));
    }
  }
  const AttentionConfig& c = config_;
  ASSIGN_OR_RETURN(Tensor qkv, LinearRows(x.values, fused_));
  std::vector<int64_t> starts;
  for (int64_t b = 0; b < x.batch(); ++b) starts.push_back(caches[b]->length());
  Rotate(qkv, x.lengths, starts);
  Tensor concatenated = Tensor::Zeros({x.batch(), x.time(), c.heads_width()});
  if (config_.kind == AttentionKind::kLinear) {
    for (int64_t b = 0; b < x.batch(); ++b) {
      const Tensor rows = qkv.Select(b);  // [T, q + k + v]
      const float* q = rows.data();
      const float* k = q + c.query_width();
      const float* v = k + c.key_width();
      float* out = concatenated.Select(b).data();
      for (int64_t i = 0; i < x.lengths[b]; ++i) {
        caches[b]->linear_state().Step(k + i * rows.stride(0), v + i * rows.stride(0),
                                       q + i * rows.stride(0), config_.feature_map,
                                       out + i * concatenated.stride(1));
      }
    }
    return ProjectOutput(std::move(concatenated), x.lengths, nullptr);
  }
  // Every sequence's new keys and values join its cache, then one kernel call attends each
  // sequence's new queries over all of its cached rows.
  std::vector<int64_t> k_lengths;
  for (int64_t b = 0; b < x.batch(); ++b) {
    const Tensor rows = qkv.Select(b);
    const float* k = rows.data() + c.query_width();
    caches[b]->Append(k, rows.stride(0), k + c.key_width(), rows.stride(0), x.lengths[b]);
    k_lengths.push_back(caches[b]->length());
  }
  const Tensor q = qkv.Slice(2, 0, c.query_width());
  const auto attend = [&]<typename T>() {
    std::vector<RowBlocksOf<T>> keys, values;
    for (int64_t b = 0; b < x.batch(); ++b) {
      keys.push_back(caches[b]->template keys<T>());
      values.push_back(caches[b]->template values<T>());
    }
    ScaledDotProductAttention(q, x.lengths, std::span<const RowBlocksOf<T>>(keys),
                              std::span<const RowBlocksOf<T>>(values), k_lengths, config_.num_heads,
                              score_options(), concatenated);
  };
  // Every sequence of a batch shares the model's pool, and so its element type.
  switch (x.batch() > 0 ? caches[0]->type() : KvCacheType::kFloat32) {
    case KvCacheType::kFloat32:
      attend.template operator()<float>();
      break;
    case KvCacheType::kF16:
      attend.template operator()<Half>();
      break;
    case KvCacheType::kBf16:
      attend.template operator()<uint16_t>();
      break;
  }
  if (config_.kind == AttentionKind::kExclusive) {
    // Each query's own value is among the new rows: row i of the new values is token i's.
    RemoveOwnValueComponent(concatenated,
                            qkv.Slice(2, c.query_width() + c.key_width(), c.value_width()),
                            x.lengths, x.lengths, config_.num_heads, config_.kv_heads());
  }
  return ProjectOutput(std::move(concatenated), x.lengths, nullptr);
}

}  // namespace attnserve
