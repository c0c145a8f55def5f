#include "engine/blocks/transformer_block.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/kernels/vector_ops.h"

namespace attnserve {
namespace {

absl::StatusOr<MultiHeadAttention> LoadAttention(WeightReader& weights, const std::string& prefix,
                                                 const AttentionConfig& config, bool bias) {
  AttentionWeights w;
  const struct {
    const char* name;
    int64_t out, in;
    Tensor *weight, *bias;
  } projections[] = {
      {".q_proj", config.query_width(), config.model_dim, &w.q_weight, &w.q_bias},
      {".k_proj", config.key_width(), config.key_input_dim(), &w.k_weight, &w.k_bias},
      {".v_proj", config.value_width(), config.key_input_dim(), &w.v_weight, &w.v_bias},
      {".out_proj", config.out_dim(), config.heads_width(), &w.out_weight, &w.out_bias},
  };
  // Plain tensors: MultiHeadAttention fuses q, k, v before it packs.
  for (const auto& p : projections) {
    ASSIGN_OR_RETURN(*p.weight, weights.Take(prefix + p.name + ".weight", {p.out, p.in}));
    ASSIGN_OR_RETURN(*p.bias, weights.TakeIf(bias, prefix + p.name + ".bias", {p.out}));
  }
  auto layer = MultiHeadAttention::Create(config, std::move(w), weights.format());
  if (!layer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(weights.path(), ": ", prefix, ": ", layer.status().message()));
  }
  return layer;
}

// h += delta, over whole contiguous tensors.
void AddInPlace(Tensor& h, const Tensor& delta) {
  vec::Axpy(1.0f, delta.data(), h.data(), h.size());
}

// One residual sublayer around `apply`, pre- or post-norm; h is updated in place.
template <typename Apply>
absl::Status Sublayer(bool pre_norm, const Norm& norm, const std::vector<int64_t>& lengths,
                      Tensor& h, Apply apply) {
  if (pre_norm) {
    Tensor normed(h.shape());
    RETURN_IF_ERROR(norm.Apply(h, normed));
    ASSIGN_OR_RETURN(const Tensor delta, apply(normed));
    AddInPlace(h, delta);
  } else {
    ASSIGN_OR_RETURN(const Tensor delta, apply(h));
    AddInPlace(h, delta);
    RETURN_IF_ERROR(norm.Apply(h, h));
  }
  ZeroPadding(h, lengths);
  return absl::OkStatus();
}

}  // namespace

BlockConfig BlockConfigFor(const ModelConfig& m) {
  BlockConfig c;
  c.dim = m.model_dim;
  c.attention = m.attention;
  c.feature_map = m.feature_map;
  c.num_heads = m.num_heads;
  c.head_dim_qk = m.head_dim_qk;
  c.head_dim_v = m.head_dim_v;
  c.alibi = m.positions == PositionKind::kAlibi;
  c.bias = m.bias;
  c.norm = m.norm;
  c.norm_eps = m.norm_eps;
  c.pre_norm = m.pre_norm;
  c.ffn_dim = m.ffn_dim;
  c.activation = m.activation;
  c.gated_ffn = m.gated_ffn;
  c.num_kv_heads = m.num_kv_heads;
  c.rotary = m.rotary;
  c.window = m.attention_window;
  return c;
}

absl::StatusOr<TransformerBlock> TransformerBlock::Load(WeightReader& weights,
                                                        const std::string& prefix,
                                                        const BlockConfig& config) {
  TransformerBlock block;
  block.config_ = config;
  AttentionConfig attention;
  attention.kind = config.attention;
  attention.model_dim = config.dim;
  attention.num_heads = config.num_heads;
  attention.num_kv_heads = config.num_kv_heads;
  attention.head_dim_qk = config.head_dim_qk;
  attention.head_dim_v = config.head_dim_v;
  attention.feature_map = config.feature_map;
  auto load_norm = [&](const std::string& name) {
    return Norm::Load(weights, prefix + "." + name, config.norm, config.dim, config.norm_eps);
  };
  if (config.self_attention) {
    AttentionConfig self = attention;
    self.causal = config.causal;
    self.alibi = config.alibi;
    self.scale = config.attention_scale;
    self.rotary = config.rotary;
    self.window = config.window;
    ASSIGN_OR_RETURN(block.self_attn_,
                     LoadAttention(weights, prefix + ".self_attn", self, config.bias));
    ASSIGN_OR_RETURN(block.self_attn_norm_, load_norm("self_attn_norm"));
  }
  if (config.cross_attention) {
    AttentionConfig cross = attention;
    cross.memory_dim = config.memory_dim > 0 ? config.memory_dim : config.dim;
    // XSA removes a token's own value, which a memory does not hold.
    if (cross.kind == AttentionKind::kExclusive) cross.kind = AttentionKind::kSoftmax;
    ASSIGN_OR_RETURN(block.cross_attn_,
                     LoadAttention(weights, prefix + ".cross_attn", cross, config.bias));
    ASSIGN_OR_RETURN(block.cross_attn_norm_, load_norm("cross_attn_norm"));
  }
  ASSIGN_OR_RETURN(block.ffn_, FeedForward::Load(weights, prefix + ".ffn", config.ffn()));
  ASSIGN_OR_RETURN(block.ffn_norm_, load_norm("ffn_norm"));
  return block;
}

absl::StatusOr<KeyValues> TransformerBlock::ProjectMemory(const PaddedBatch& memory) const {
  if (!cross_attn_) return absl::FailedPreconditionError("block has no cross-attention");
  return cross_attn_->ProjectMemory(memory);
}

absl::StatusOr<Tensor> TransformerBlock::Forward(const PaddedBatch& x, const KeyValues* memory,
                                                 std::span<LayerCache* const> caches,
                                                 Tensor* self_heads) const {
  RETURN_IF_ERROR(CheckPaddedBatch("block input", x, config_.dim));
  if (cross_attn_ && memory == nullptr) {
    return absl::InvalidArgumentError("block with cross-attention needs a memory");
  }
  Tensor h = x.values.Clone();
  const std::vector<int64_t>& lengths = x.lengths;
  if (self_attn_) {
    RETURN_IF_ERROR(Sublayer(config_.pre_norm, *self_attn_norm_, lengths, h, [&](const Tensor& in) {
      return caches.empty() ? self_attn_->Forward({in, lengths}, nullptr, self_heads)
                            : self_attn_->ForwardCached({in, lengths}, caches);
    }));
  }
  if (cross_attn_) {
    RETURN_IF_ERROR(
        Sublayer(config_.pre_norm, *cross_attn_norm_, lengths, h, [&](const Tensor& in) {
          return cross_attn_->Attend({in, lengths}, *memory);
        }));
  }
  RETURN_IF_ERROR(Sublayer(config_.pre_norm, ffn_norm_, lengths, h,
                           [&](const Tensor& in) -> absl::StatusOr<Tensor> {
                             Tensor out(in.shape());
                             RETURN_IF_ERROR(ffn_.Apply(in, out, false));
                             return out;
                           }));
  return h;
}

}  // namespace attnserve
