#include "engine/attention/attention_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace attnserve {
namespace {

absl::Status CheckShape(const char* name, const Tensor& tensor, const Shape& expected,
                        bool optional) {
  if (optional && tensor.empty()) return absl::OkStatus();
  if (tensor.empty()) return absl::InvalidArgumentError(absl::StrCat(name, " is missing"));
  if (tensor.shape() != expected || !tensor.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has shape ", tensor.ShapeString(),
                                                   ", expected ", ShapeToString(expected)));
  }
  return absl::OkStatus();
}

}  // namespace

float AttentionConfig::score_scale() const {
  return scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim_qk));
}

absl::Status CheckAttentionConfig(const AttentionConfig& config) {
  auto positive = [](const char* field, int64_t value) {
    return value > 0 ? absl::OkStatus()
                     : absl::InvalidArgumentError(
                           absl::StrCat("attention ", field, " is ", value, ", must be positive"));
  };
  for (auto status :
       {positive("model_dim", config.model_dim), positive("num_heads", config.num_heads),
        positive("head_dim_qk", config.head_dim_qk), positive("head_dim_v", config.head_dim_v)}) {
    RETURN_IF_ERROR(status);
  }
  if (config.memory_dim < 0 || config.output_dim < 0 || config.scale < 0.0f) {
    return absl::InvalidArgumentError("attention memory_dim, output_dim and scale must be >= 0");
  }
  if (config.kind == AttentionKind::kExclusive && config.is_cross()) {
    return absl::InvalidArgumentError(
        "exclusive self-attention removes each token's own value, so it needs self-attention "
        "(memory_dim 0)");
  }
  if (config.kind == AttentionKind::kLinear && config.alibi) {
    return absl::InvalidArgumentError("ALiBi biases softmax scores; linear attention has none");
  }
  if (config.num_kv_heads < 0 || config.num_heads % config.kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("attention num_kv_heads is ",
                                                   config.num_kv_heads, ", must divide num_heads (",
                                                   config.num_heads, ")"));
  }
  if (config.rotary.enabled()) {
    if (config.is_cross()) {
      return absl::InvalidArgumentError(
          "rotary positions need self-attention: a cross-attention memory shares no positions "
          "with the queries");
    }
    if (config.kind == AttentionKind::kLinear) {
      return absl::InvalidArgumentError(
          "rotary positions need softmax or exclusive attention: linear attention applies its "
          "feature map to queries and keys, and rotating them first no longer makes the scores "
          "depend on relative positions alone");
    }
    RETURN_IF_ERROR(CheckRotaryConfig(config.rotary, config.head_dim_qk));
  }
  if (config.window < 0 ||
      (config.window > 0 && (!config.causal || config.kind == AttentionKind::kLinear))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention window is ", config.window,
        "; a sliding window needs causal softmax or exclusive attention and a positive size"));
  }
  return absl::OkStatus();
}

absl::Status CheckAttentionWeights(const AttentionConfig& config, const AttentionWeights& w) {
  RETURN_IF_ERROR(CheckAttentionConfig(config));
  const int64_t qk = config.query_width(), kk = config.key_width(), kv = config.value_width();
  const int64_t in = config.key_input_dim();
  const struct {
    const char* name;
    const Tensor& tensor;
    Shape shape;
    bool optional;
  } expected[] = {
      {"q_proj.weight", w.q_weight, {qk, config.model_dim}, false},
      {"q_proj.bias", w.q_bias, {qk}, true},
      {"k_proj.weight", w.k_weight, {kk, in}, false},
      {"k_proj.bias", w.k_bias, {kk}, true},
      {"v_proj.weight", w.v_weight, {kv, in}, false},
      {"v_proj.bias", w.v_bias, {kv}, true},
      {"out_proj.weight", w.out_weight, {config.out_dim(), config.heads_width()}, false},
      {"out_proj.bias", w.out_bias, {config.out_dim()}, true},
  };
  for (const auto& e : expected) {
    RETURN_IF_ERROR(CheckShape(e.name, e.tensor, e.shape, e.optional));
  }
  return absl::OkStatus();
}

}  // namespace attnserve
