// BERT, RoBERTa, XLM-RoBERTa and DistilBERT checkpoints (transformers' modeling_bert.py,
// modeling_roberta.py, modeling_distilbert.py): absolute learned positions, token type embeddings
// (type 1 for the second text of a pair), a LayerNorm over the embeddings, post-norm blocks, and
// the *ForSequenceClassification heads.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/importers/hf_importers.h"

namespace attnserve {
namespace {

// The checkpoint's names for one family.
struct BertNames {
  std::string embeddings, layer;  // "embeddings.", "encoder.layer." + i
  std::string q, k, v, out, attention_norm, fc1, fc2, ffn_norm;
};

const BertNames kBert = {"embeddings.",
                         "encoder.layer.",
                         ".attention.self.query",
                         ".attention.self.key",
                         ".attention.self.value",
                         ".attention.output.dense",
                         ".attention.output.LayerNorm",
                         ".intermediate.dense",
                         ".output.dense",
                         ".output.LayerNorm"};

const BertNames kDistilBert = {"embeddings.",       "transformer.layer.", ".attention.q_lin",
                               ".attention.k_lin",  ".attention.v_lin",   ".attention.out_lin",
                               ".sa_layer_norm",    ".ffn.lin1",          ".ffn.lin2",
                               ".output_layer_norm"};

// A *ForSequenceClassification checkpoint's head, on the first token's state: BERT's pooler
// (tanh) and classifier, RoBERTa's and XLM-R's classifier.dense (tanh) and classifier.out_proj,
// DistilBERT's pre_classifier (relu) and classifier. Their names are outside the base model's
// prefix, but for BERT's pooler.
absl::Status TakeClassifier(const std::string& model_type, HfTensors& tensors,
                            ImportedModel& model) {
  ClassifierConfig& head = model.config.classifier;
  const int64_t d = model.config.model_dim;
  const bool bert = model_type == "bert", distil = model_type == "distilbert";
  head.pooling = Pooling::kFirst;
  head.dense = true;
  head.dense_activation =
      distil ? ClassifierConfig::DenseActivation::kRelu : ClassifierConfig::DenseActivation::kTanh;
  // A linear layer's weight and bias, [rows, d] and [rows], under the engine's name `to`.
  const auto take = [&](const std::string& from, bool prefixed, const std::string& to,
                        int64_t rows) -> absl::Status {
    for (const auto& [suffix, shape] :
         {std::pair<std::string, Shape>{".weight", {rows, d}}, {".bias", {rows}}}) {
      ASSIGN_OR_RETURN(model.tensors[to + suffix],
                       prefixed ? tensors.Take(from + suffix, shape)
                                : tensors.TakeOutsidePrefix(from + suffix, shape));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(take(bert     ? "pooler.dense"
                       : distil ? "pre_classifier"
                                : "classifier.dense",
                       /*prefixed=*/bert, "classifier.dense", d));
  return take(bert || distil ? "classifier" : "classifier.out_proj", /*prefixed=*/false,
              "classifier.out", head.num_labels);
}

}  // namespace

absl::Status ImportBertFamily(const std::string& model_type, FieldReader& read, HfTensors& tensors,
                              ImportedModel& model) {
  const bool distil = model_type == "distilbert";
  const bool roberta = model_type == "roberta" || model_type == "xlm-roberta";
  const BertNames& names = distil ? kDistilBert : kBert;
  ModelConfig& c = model.config;
  c.architecture = "encoder";
  c.vocab_size = read.Int("vocab_size", 1, 1 << 22, std::nullopt);
  c.model_dim = read.Int(distil ? "dim" : "hidden_size", 1, 1 << 16, std::nullopt);
  c.num_layers = read.Int(distil ? "n_layers" : "num_hidden_layers", 1, 1024, std::nullopt);
  c.num_heads = read.Int(distil ? "n_heads" : "num_attention_heads", 1, 1024, std::nullopt);
  c.ffn_dim = read.Int(distil ? "hidden_dim" : "intermediate_size", 1, 1 << 20, std::nullopt);
  c.activation = ActivationOf(read, distil ? "activation" : "hidden_act", "gelu");
  // DistilBERT's LayerNorms have transformers' fixed eps.
  c.norm_eps = distil ? 1e-12f : static_cast<float>(read.Real("layer_norm_eps", 0, 1, 1e-12));
  const int64_t positions = read.Int("max_position_embeddings", 1, 1 << 20, 512);
  int64_t type_rows = 0, first_position = 0;
  if (!distil) {
    type_rows = read.Int("type_vocab_size", 0, 1 << 16, 2);
    read.Choice<std::string>("position_embedding_type", {{"absolute", "absolute"}}, "absolute");
    for (const char* field : {"is_decoder", "add_cross_attention"}) {
      if (read.Bool(field, false)) read.Fail(field, "is true: only the encoder is served");
    }
  }
  if (roberta) {
    // RoBERTa and XLM-R number positions after the padding index: the first token is at pad + 1.
    first_position = read.Int("pad_token_id", 0, positions - 2, 1) + 1;
  }
  RETURN_IF_ERROR(read.status());
  ASSIGN_OR_RETURN(c.head_dim_qk, HeadDim(read, c.model_dim, c.num_heads,
                                          distil ? "n_heads" : "num_attention_heads"));
  c.head_dim_v = c.head_dim_qk;
  c.pre_norm = false;
  c.embed_norm = true;
  c.positions = PositionKind::kLearned;
  c.max_positions = positions - first_position;

  const std::string prefix = distil ? "distilbert." : roberta ? "roberta." : model_type + ".";
  tensors.set_prefix(tensors.Has(prefix + names.embeddings + "word_embeddings.weight") ? prefix
                                                                                       : "");
  const int64_t d = c.model_dim;
  auto& out = model.tensors;
  const std::string& e = names.embeddings;
  ASSIGN_OR_RETURN(out["embed_tokens.weight"],
                   tensors.Take(e + "word_embeddings.weight", {c.vocab_size, d}));
  ASSIGN_OR_RETURN(const Tensor table,
                   tensors.Take(e + "position_embeddings.weight", {positions, d}));
  out["embed_positions"] = table.Slice(0, first_position, c.max_positions).Clone();
  if (type_rows > 0) {
    c.token_types = type_rows;
    ASSIGN_OR_RETURN(out["embed_token_types"],
                     tensors.Take(e + "token_type_embeddings.weight", {type_rows, d}));
  }
  // A norm's weight and bias, under either of the names transformers has used for them.
  auto take_norm = [&](const std::string& from, const std::string& to) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor weight, tensors.TakeEither({from + ".weight", from + ".gamma"}, {d}));
    ASSIGN_OR_RETURN(Tensor bias, tensors.TakeEither({from + ".bias", from + ".beta"}, {d}));
    out[to + ".weight"] = std::move(weight);
    out[to + ".bias"] = std::move(bias);
    return absl::OkStatus();
  };
  auto take_linear = [&](const std::string& from, const std::string& to, int64_t rows,
                         int64_t cols) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor weight, tensors.Take(from + ".weight", {rows, cols}));
    ASSIGN_OR_RETURN(Tensor bias, tensors.Take(from + ".bias", {rows}));
    out[to + ".weight"] = std::move(weight);
    out[to + ".bias"] = std::move(bias);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(take_norm(e + "LayerNorm", "embed_norm"));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string from = absl::StrCat(names.layer, i);
    const std::string to = absl::StrCat("layers.", i);
    for (const absl::Status& status :
         {take_linear(from + names.q, to + ".self_attn.q_proj", d, d),
          take_linear(from + names.k, to + ".self_attn.k_proj", d, d),
          take_linear(from + names.v, to + ".self_attn.v_proj", d, d),
          take_linear(from + names.out, to + ".self_attn.out_proj", d, d),
          take_norm(from + names.attention_norm, to + ".self_attn_norm"),
          take_linear(from + names.fc1, to + ".ffn.fc1", c.ffn_dim, d),
          take_linear(from + names.fc2, to + ".ffn.fc2", d, c.ffn_dim),
          take_norm(from + names.ffn_norm, to + ".ffn_norm")}) {
      RETURN_IF_ERROR(status);
    }
  }
  if (c.classifier.num_labels > 0) RETURN_IF_ERROR(TakeClassifier(model_type, tensors, model));
  // Heads for other tasks (masked LM, BERT's pooler) and buffers of position and type ids.
  return tensors.CheckAllTaken(
      {"pooler.", "cls.", "lm_head.", "vocab_transform.", "vocab_layer_norm.", "vocab_projector."},
      {"position_ids", "token_type_ids"});
}

}  // namespace attnserve
