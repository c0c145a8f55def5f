// Llama-family checkpoints (transformers' modeling_llama.py, modeling_mistral.py,
// modeling_qwen2.py): pre-norm causal LMs with RMSNorm, rotary positions (half-split pairs),
// grouped-query attention and a SwiGLU feed-forward network (gate_proj, up_proj, down_proj).
// They differ in biases (Llama's attention_bias and mlp_bias; Qwen2's on q, k and v only),
// sliding windows (Mistral's on every layer; Qwen2's on some layers, refused) and head widths
// (Llama and Mistral may set head_dim). Where a checkpoint has biases on only some projections,
// the others get zero biases: the engine's bias setting covers every projection of a layer.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/importers/hf_importers.h"

namespace attnserve {
namespace {

// A rope_scaling list of numbers, as float32 (transformers makes a float32 tensor of it).
std::vector<float> ReadFactors(FieldReader& s, const nlohmann::json& scaling,
                               const std::string& key) {
  std::vector<float> factors;
  const auto it = scaling.find(key);
  if (it == scaling.end() || !it->is_array()) {
    s.Fail(key, "must be a list of numbers");
    return factors;
  }
  for (const nlohmann::json& value : *it) {
    if (!value.is_number()) {
      s.Fail(key, "must be a list of numbers");
      break;
    }
    factors.push_back(static_cast<float>(value.get<double>()));
  }
  return factors;
}

// rope_scaling's original_max_position_embeddings, which transformers 4.45.2 reads for llama3
// only: yarn and longrope take the original context from elsewhere (below), and later versions
// read this key instead (yarn then also derives the factor from it). A value that disagrees
// would give a different model in each version, so it is refused.
void CheckOriginalContext(FieldReader& s, int64_t original) {
  const int64_t given = s.Int("original_max_position_embeddings", 1, 1 << 24, original);
  if (given != original) {
    s.Fail("original_max_position_embeddings",
           absl::StrCat("is ", given, ", not the original context transformers 4.45.2 uses (",
                        original, "): later versions read it differently, so it is ambiguous"));
  }
}

// rope_scaling: transformers' rope_type (or the older "type") default, linear, dynamic, llama3,
// yarn or longrope, with what transformers 4.45.2 reads of them. Other keys are transformers'
// to ignore as well.
void ReadRopeScaling(FieldReader& read, ModelConfig& c) {
  const nlohmann::json* scaling = read.Object("rope_scaling");
  if (scaling == nullptr) return;
  FieldReader s(*scaling, read.path() + " rope_scaling");
  const std::string field = scaling->contains("rope_type") ? "rope_type" : "type";
  const std::map<std::string, RopeScaling> kinds = {
      {"default", RopeScaling::kNone},    {"linear", RopeScaling::kLinear},
      {"dynamic", RopeScaling::kDynamic}, {"llama3", RopeScaling::kLlama3},
      {"yarn", RopeScaling::kYarn},       {"longrope", RopeScaling::kLongRope}};
  RotaryConfig& r = c.rotary;
  r.scaling = s.Choice<RopeScaling>(field, kinds, std::nullopt);
  if (r.scaling != RopeScaling::kNone && r.scaling != RopeScaling::kLongRope) {
    r.factor = s.Real("factor", 1.0, 1e6, 1.0);
  }
  if (r.scaling == RopeScaling::kDynamic || r.scaling == RopeScaling::kYarn) {
    // transformers scales past max_position_embeddings; the served context grows by the factor
    // (Qwen2.5's 32768 positions with yarn's factor 4: 131072).
    r.original_max_positions = c.max_positions;
    c.max_positions = static_cast<int64_t>(static_cast<double>(c.max_positions) * r.factor);
  }
  if (r.scaling == RopeScaling::kLlama3) {
    r.low_freq_factor = s.Real("low_freq_factor", 0.0, 1e6, 1.0);
    r.high_freq_factor = s.Real("high_freq_factor", 0.0, 1e6, 4.0);
    r.original_max_positions = s.Int("original_max_position_embeddings", 1, 1 << 24, std::nullopt);
  }
  if (r.scaling == RopeScaling::kYarn) {
    CheckOriginalContext(s, r.original_max_positions);
    r.beta_fast = s.Real("beta_fast", 1e-6, 1e6, 32.0);
    r.beta_slow = s.Real("beta_slow", 1e-6, 1e6, 1.0);
    r.attention_factor = s.Real("attention_factor", 1e-6, 1e6, 0.1 * std::log(r.factor) + 1.0);
    for (const std::string key : {"mscale", "mscale_all_dim"}) {
      if (scaling->contains(key)) {
        s.Fail(key, "is set: DeepSeek's YaRN attention scales are not supported");
      }
    }
  }
  if (r.scaling == RopeScaling::kLongRope) {
    // Phi-3 sets original_max_position_embeddings beside max_position_embeddings, the extended
    // context; without it, the context extends max_position_embeddings by the factor.
    const int64_t phi3_original = read.Int("original_max_position_embeddings", 1, 1 << 24, 0);
    double factor = 1.0;
    if (phi3_original > 0) {
      r.original_max_positions = phi3_original;
      factor = static_cast<double>(c.max_positions) / static_cast<double>(phi3_original);
    } else if (!scaling->contains("factor")) {
      s.Fail("factor", "is missing (longrope needs it without original_max_position_embeddings)");
    } else {
      r.original_max_positions = c.max_positions;
      factor = s.Real("factor", 1.0, 1e6, 1.0);
      c.max_positions = static_cast<int64_t>(static_cast<double>(c.max_positions) * factor);
    }
    CheckOriginalContext(s, r.original_max_positions);
    const double original = static_cast<double>(r.original_max_positions);
    r.attention_factor =
        s.Real("attention_factor", 1e-6, 1e6,
               factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(original)));
    r.short_factor = ReadFactors(s, *scaling, "short_factor");
    r.long_factor = ReadFactors(s, *scaling, "long_factor");
  }
  read.Adopt(s);
}

}  // namespace

absl::Status ImportLlamaFamily(const std::string& model_type, FieldReader& read, HfTensors& tensors,
                               ImportedModel& model) {
  ModelConfig& c = model.config;
  c.architecture = "causal_lm";
  c.vocab_size = read.Int("vocab_size", 1, 1 << 22, std::nullopt);
  c.model_dim = read.Int("hidden_size", 1, 1 << 16, std::nullopt);
  c.num_layers = read.Int("num_hidden_layers", 1, 1024, std::nullopt);
  c.num_heads = read.Int("num_attention_heads", 1, 1024, std::nullopt);
  c.num_kv_heads = read.Int("num_key_value_heads", 1, 1024, c.num_heads);
  c.ffn_dim = read.Int("intermediate_size", 1, 1 << 20, std::nullopt);
  c.max_positions = read.Int("max_position_embeddings", 1, 1 << 24, std::nullopt);
  c.norm_eps = static_cast<float>(read.Real("rms_norm_eps", 0, 1, 1e-6));
  c.activation = ActivationOf(read, "hidden_act", "silu");
  c.tie_embeddings = read.Bool("tie_word_embeddings", model_type == "qwen2");
  const bool qwen2 = model_type == "qwen2";
  const bool attention_bias = !qwen2 && read.Bool("attention_bias", false);
  const bool mlp_bias = model_type == "llama" && read.Bool("mlp_bias", false);
  c.rotary.theta = read.Real("rope_theta", 1.0, 1e12, 10000.0);
  RETURN_IF_ERROR(read.status());
  ReadRopeScaling(read, c);
  if (model_type == "mistral") {
    c.attention_window = read.Int("sliding_window", 1, 1 << 24, 0);
  }
  if (qwen2 && read.Bool("use_sliding_window", false)) {
    read.Fail("use_sliding_window",
              "is true: Qwen2's sliding window on only some layers is not supported");
  }
  if (c.num_kv_heads > c.num_heads || c.num_heads % c.num_kv_heads != 0) {
    read.Fail("num_key_value_heads",
              absl::StrCat("is ", c.num_kv_heads, ", which does not divide num_attention_heads (",
                           c.num_heads, ")"));
  }
  RETURN_IF_ERROR(read.status());
  if (qwen2) {
    ASSIGN_OR_RETURN(c.head_dim_qk, HeadDim(read, c.model_dim, c.num_heads, "num_attention_heads"));
  } else {
    c.head_dim_qk = read.Int("head_dim", 1, 1 << 16, c.model_dim / c.num_heads);
    RETURN_IF_ERROR(read.status());
  }
  c.head_dim_v = c.head_dim_qk;
  c.rotary.dims = c.head_dim_qk;
  c.positions = PositionKind::kRope;
  c.norm = NormKind::kRmsNorm;
  c.pre_norm = true;
  c.gated_ffn = true;
  c.bias = qwen2 || attention_bias || mlp_bias;

  tensors.set_prefix(tensors.Has("model.embed_tokens.weight") ? "model." : "");
  const int64_t d = c.model_dim, f = c.ffn_dim;
  const int64_t q = c.num_heads * c.head_dim_qk, kv = c.num_kv_heads * c.head_dim_qk;
  auto& out = model.tensors;
  auto take = [&](const std::string& from, const std::string& to,
                  const Shape& shape) -> absl::Status {
    ASSIGN_OR_RETURN(out[to], tensors.Take(from, shape));
    return absl::OkStatus();
  };
  // A projection and, where the engine expects one, its bias: from the checkpoint when it has
  // one, else zero.
  auto take_linear = [&](const std::string& from, const std::string& to, int64_t outs, int64_t in,
                         bool has_bias) {
    absl::Status status = take(from + ".weight", to + ".weight", {outs, in});
    if (!status.ok() || !c.bias) return status;
    if (has_bias) return take(from + ".bias", to + ".bias", {outs});
    out[to + ".bias"] = Tensor::Zeros({outs});
    return absl::OkStatus();
  };
  for (const absl::Status& status :
       {take("embed_tokens.weight", "embed_tokens.weight", {c.vocab_size, d}),
        take("norm.weight", "final_norm.weight", {d})}) {
    RETURN_IF_ERROR(status);
  }
  const bool qkv_bias = qwen2 || attention_bias;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string from = absl::StrCat("layers.", i);
    const std::string to = absl::StrCat("layers.", i);
    for (const absl::Status& status :
         {take_linear(from + ".self_attn.q_proj", to + ".self_attn.q_proj", q, d, qkv_bias),
          take_linear(from + ".self_attn.k_proj", to + ".self_attn.k_proj", kv, d, qkv_bias),
          take_linear(from + ".self_attn.v_proj", to + ".self_attn.v_proj", kv, d, qkv_bias),
          take_linear(from + ".self_attn.o_proj", to + ".self_attn.out_proj", d, q, attention_bias),
          take(from + ".input_layernorm.weight", to + ".self_attn_norm.weight", {d}),
          take_linear(from + ".mlp.gate_proj", to + ".ffn.gate", f, d, mlp_bias),
          take_linear(from + ".mlp.up_proj", to + ".ffn.fc1", f, d, mlp_bias),
          take_linear(from + ".mlp.down_proj", to + ".ffn.fc2", d, f, mlp_bias),
          take(from + ".post_attention_layernorm.weight", to + ".ffn_norm.weight", {d})}) {
      RETURN_IF_ERROR(status);
    }
  }
  if (c.classifier.num_labels > 0) {
    // *ForSequenceClassification: a score layer without bias on the last token's state, and no
    // LM head.
    c.classifier.pooling = Pooling::kLast;
    c.classifier.dense = false;
    c.classifier.out_bias = false;
    tensors.set_prefix("");
    RETURN_IF_ERROR(take("score.weight", "classifier.out.weight", {c.classifier.num_labels, d}));
  } else if (!c.tie_embeddings) {
    tensors.set_prefix("");
    RETURN_IF_ERROR(take("lm_head.weight", "lm_head.weight", {c.vocab_size, d}));
  }
  // Rotary frequency buffers of older checkpoints; a tied head saved anyway.
  return tensors.CheckAllTaken({"lm_head."}, {".rotary_emb.inv_freq"});
}

}  // namespace attnserve
