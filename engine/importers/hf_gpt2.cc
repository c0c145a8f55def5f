// GPT-2 checkpoints (transformers' modeling_gpt2.py): learned positions, pre-norm blocks with a
// final LayerNorm, Conv1D weights stored [in, out] (transposed here), q, k and v fused in c_attn,
// the LM head tied to the token embedding unless tie_word_embeddings says otherwise.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/importers/hf_importers.h"

namespace attnserve {

absl::Status ImportGpt2(FieldReader& read, HfTensors& tensors, ImportedModel& model) {
  ModelConfig& c = model.config;
  c.architecture = "causal_lm";
  c.vocab_size = read.Int("vocab_size", 1, 1 << 22, std::nullopt);
  c.model_dim = read.Int("n_embd", 1, 1 << 16, std::nullopt);
  c.num_layers = read.Int("n_layer", 1, 1024, std::nullopt);
  c.num_heads = read.Int("n_head", 1, 1024, std::nullopt);
  c.max_positions = read.Int("n_positions", 1, 1 << 20, std::nullopt);
  c.norm_eps = static_cast<float>(read.Real("layer_norm_epsilon", 0, 1, 1e-5));
  c.activation = ActivationOf(read, "activation_function", "gelu_new");
  c.tie_embeddings = read.Bool("tie_word_embeddings", true);
  if (!read.Bool("scale_attn_weights", true)) {
    read.Fail("scale_attn_weights", "is false: unscaled attention is not supported");
  }
  c.scale_scores_by_inverse_layer = read.Bool("scale_attn_by_inverse_layer_idx", false);
  if (read.Bool("add_cross_attention", false)) {
    read.Fail("add_cross_attention", "is true: not supported");
  }
  // n_inner: null means four times n_embd.
  c.ffn_dim = read.Int("n_inner", 1, 1 << 20, 4 * c.model_dim);
  RETURN_IF_ERROR(read.status());
  ASSIGN_OR_RETURN(c.head_dim_qk, HeadDim(read, c.model_dim, c.num_heads, "n_head"));
  c.head_dim_v = c.head_dim_qk;
  c.pre_norm = true;
  c.positions = PositionKind::kLearned;

  tensors.set_prefix(tensors.Has("transformer.wte.weight") ? "transformer." : "");
  const int64_t d = c.model_dim, f = c.ffn_dim;
  auto& out = model.tensors;
  auto take = [&](const std::string& from, const std::string& to, const Shape& shape,
                  bool transpose = false) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor tensor, tensors.Take(from, shape));
    out[to] = transpose ? Transposed(tensor) : std::move(tensor);
    return absl::OkStatus();
  };
  auto take_norm = [&](const std::string& from, const std::string& to) {
    absl::Status status = take(from + ".weight", to + ".weight", {d});
    return status.ok() ? take(from + ".bias", to + ".bias", {d}) : status;
  };
  // A Conv1D [in, out] as a linear layer's weight [out, in] and bias.
  auto take_conv = [&](const std::string& from, const std::string& to, int64_t in, int64_t outs) {
    absl::Status status = take(from + ".weight", to + ".weight", {in, outs}, true);
    return status.ok() ? take(from + ".bias", to + ".bias", {outs}) : status;
  };
  for (const absl::Status& status : {take("wte.weight", "embed_tokens.weight", {c.vocab_size, d}),
                                     take("wpe.weight", "embed_positions", {c.max_positions, d}),
                                     take_norm("ln_f", "final_norm")}) {
    RETURN_IF_ERROR(status);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string from = absl::StrCat("h.", i);
    const std::string to = absl::StrCat("layers.", i);
    for (const absl::Status& status :
         {take_conv(from + ".attn.c_attn", to + ".qkv", d, 3 * d),
          take_conv(from + ".attn.c_proj", to + ".self_attn.out_proj", d, d),
          take_norm(from + ".ln_1", to + ".self_attn_norm"),
          take_conv(from + ".mlp.c_fc", to + ".ffn.fc1", d, f),
          take_conv(from + ".mlp.c_proj", to + ".ffn.fc2", f, d),
          take_norm(from + ".ln_2", to + ".ffn_norm")}) {
      RETURN_IF_ERROR(status);
    }
    // c_attn's rows, once transposed, are q's, then k's, then v's.
    const Tensor qkv = out[to + ".qkv.weight"], qkv_bias = out[to + ".qkv.bias"];
    const char* parts[] = {".self_attn.q_proj", ".self_attn.k_proj", ".self_attn.v_proj"};
    for (int part = 0; part < 3; ++part) {
      out[to + parts[part] + ".weight"] = qkv.Slice(0, part * d, d);
      out[to + parts[part] + ".bias"] = qkv_bias.Slice(0, part * d, d);
    }
    out.erase(to + ".qkv.weight");
    out.erase(to + ".qkv.bias");
  }
  if (!c.tie_embeddings) {
    tensors.set_prefix("");
    RETURN_IF_ERROR(take("lm_head.weight", "lm_head.weight", {c.vocab_size, d}));
  }
  // The causal mask buffers of older checkpoints; a tied head saved anyway.
  return tensors.CheckAllTaken({"lm_head."}, {".attn.bias", ".attn.masked_bias"});
}

}  // namespace attnserve
