#include "engine/importers/model_config.h"

#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/importers/field_reader.h"

namespace attnserve {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxVocab = 1 << 22;

// rope_theta, rope_dims, rope_interleaved and rope_scaling (docs/model-format.md).
void ReadRotary(FieldReader& read, ModelConfig& c) {
  RotaryConfig& r = c.rotary;
  r.theta = read.Real("rope_theta", 1.0, 1e12, 10000.0);
  r.dims = read.Int("rope_dims", 2, kMaxDim, c.head_dim_qk);
  r.interleaved = read.Bool("rope_interleaved", false);
  const Json* scaling = read.Object("rope_scaling");
  if (scaling == nullptr) return;
  FieldReader s(*scaling, read.path() + " rope_scaling");
  r.scaling = s.Choice<RopeScaling>("type",
                                    {{"linear", RopeScaling::kLinear},
                                     {"dynamic", RopeScaling::kDynamic},
                                     {"llama3", RopeScaling::kLlama3}},
                                    std::nullopt);
  r.factor = s.Real("factor", 1.0, 1e6, 1.0);
  if (r.scaling != RopeScaling::kLinear) {
    r.original_max_positions = s.Int("original_max_positions", 1, 1 << 24, std::nullopt);
  }
  if (r.scaling == RopeScaling::kLlama3) {
    r.low_freq_factor = s.Real("low_freq_factor", 0.0, 1e6, 1.0);
    r.high_freq_factor = s.Real("high_freq_factor", 0.0, 1e6, 4.0);
  }
  s.RejectUnread();
  read.Adopt(s);
}

// An encoder's "classifier" (docs/model-format.md): its tensors classifier.dense.* (when dense)
// and classifier.out.*, as the Hugging Face importers name theirs.
void ReadClassifier(FieldReader& read, ClassifierConfig& head) {
  const Json* object = read.Object("classifier");
  if (object == nullptr) return;
  FieldReader s(*object, read.path() + " classifier");
  using Dense = ClassifierConfig::DenseActivation;
  using Score = ClassifierConfig::ScoreActivation;
  head.num_labels = s.Int("num_labels", 1, kMaxVocab, std::nullopt);
  head.pooling = s.Choice<Pooling>(
      "pooling", {{"first", Pooling::kFirst}, {"mean", Pooling::kMean}, {"last", Pooling::kLast}},
      "first");
  head.dense = s.Bool("dense", false);
  head.dense_activation = s.Choice<Dense>("dense_activation",
                                          {{"none", Dense::kNone},
                                           {"tanh", Dense::kTanh},
                                           {"relu", Dense::kRelu},
                                           {"gelu", Dense::kGelu}},
                                          "tanh");
  head.out_bias = s.Bool("out_bias", true);
  head.score_activation = s.Choice<Score>(
      "score_activation",
      {{"none", Score::kNone}, {"sigmoid", Score::kSigmoid}, {"softmax", Score::kSoftmax}},
      head.num_labels == 1 ? "sigmoid" : "softmax");
  head.labels = s.Strings("labels");
  if (!head.labels.empty() && static_cast<int64_t>(head.labels.size()) != head.num_labels) {
    s.Fail("labels",
           absl::StrCat("has ", head.labels.size(), " names for ", head.num_labels, " labels"));
  }
  s.RejectUnread();
  read.Adopt(s);
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& text, const std::string& path) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  FieldReader read(json, path);
  ModelConfig c;
  const int64_t version = read.Int("format_version", 1, 1 << 20, std::nullopt);
  if (read.status().ok() && version != ModelConfig::kFormatVersion) {
    read.Fail("format_version", absl::StrCat("is ", version, "; this engine reads version ",
                                             ModelConfig::kFormatVersion));
  }
  c.architecture = read.Choice<std::string>("architecture",
                                            {{"causal_lm", "causal_lm"},
                                             {"encoder", "encoder"},
                                             {"next_word", "next_word"},
                                             {"seq2seq", "seq2seq"},
                                             {"perceiver_io", "perceiver_io"},
                                             {"set_transformer", "set_transformer"}},
                                            std::nullopt);
  c.vocab_size = read.Int("vocab_size", 0, kMaxVocab, 0);
  c.input_dim = read.Int("input_dim", 0, kMaxDim, 0);
  c.model_dim = read.Int("model_dim", 1, kMaxDim, std::nullopt);
  c.num_layers = read.Int("num_layers", 0, 1024, std::nullopt);
  c.num_heads = read.Int("num_heads", 1, 1024, std::nullopt);
  c.num_kv_heads = read.Int("num_kv_heads", 1, 1024, c.num_heads);
  c.head_dim_qk = read.Int("head_dim_qk", 1, kMaxDim, std::nullopt);
  c.head_dim_v = read.Int("head_dim_v", 1, kMaxDim, std::nullopt);
  c.ffn_dim = read.Int("ffn_dim", 1, 1 << 20, std::nullopt);
  c.activation = read.Choice<Activation>("activation",
                                         {{"relu", Activation::kRelu},
                                          {"gelu", Activation::kGeluErf},
                                          {"gelu_tanh", Activation::kGeluTanh},
                                          {"silu", Activation::kSilu}},
                                         "gelu");
  c.gated_ffn = read.Bool("gated_ffn", false);
  c.attention = read.Choice<AttentionKind>("attention",
                                           {{"softmax", AttentionKind::kSoftmax},
                                            {"exclusive", AttentionKind::kExclusive},
                                            {"linear", AttentionKind::kLinear}},
                                           "softmax");
  c.feature_map = read.Choice<FeatureMap>(
      "feature_map", {{"elu_plus_one", FeatureMap::kEluPlusOne}, {"exp", FeatureMap::kExp}},
      "elu_plus_one");
  c.bias = read.Bool("bias", true);
  c.norm = read.Choice<NormKind>("norm",
                                 {{"layer_norm", NormKind::kLayerNorm},
                                  {"rms_norm", NormKind::kRmsNorm},
                                  {"scale_norm", NormKind::kScaleNorm}},
                                 "layer_norm");
  c.norm_eps = static_cast<float>(read.Real("norm_eps", 0.0, 1.0, 1e-5));
  c.pre_norm = read.Choice<bool>("norm_position", {{"pre", true}, {"post", false}}, "pre");
  c.embed_norm = read.Bool("embed_norm", false);
  c.positions = read.Choice<PositionKind>("positions",
                                          {{"sinusoidal", PositionKind::kSinusoidal},
                                           {"learned", PositionKind::kLearned},
                                           {"alibi", PositionKind::kAlibi},
                                           {"rope", PositionKind::kRope},
                                           {"none", PositionKind::kNone}},
                                          "sinusoidal");
  c.max_positions = read.Int("max_positions", 1, 1 << 24, std::nullopt);
  if (c.positions == PositionKind::kRope) ReadRotary(read, c);
  c.attention_window = read.Int("attention_window", 0, 1 << 24, 0);
  const std::string& a = c.architecture;
  if (a == "causal_lm" || a == "seq2seq") c.tie_embeddings = read.Bool("tie_embeddings", false);
  if (a == "seq2seq") c.num_decoder_layers = read.Int("num_decoder_layers", 0, 1024, c.num_layers);
  if (a == "encoder") {
    c.pooling = read.Choice<Pooling>("pooling",
                                     {{"mean", Pooling::kMean},
                                      {"first", Pooling::kFirst},
                                      {"last", Pooling::kLast},
                                      {"pma", Pooling::kPma},
                                      {"none", Pooling::kNone}},
                                     "mean");
    c.normalize = read.Bool("normalize", false);
    c.token_types = read.Int("token_types", 0, 1 << 8, 0);
    ReadClassifier(read, c.classifier);
  }
  if (a == "next_word") {
    c.pooling =
        read.Choice<Pooling>("pooling", {{"cls", Pooling::kCls}, {"pma", Pooling::kPma}}, "cls");
  }
  if (a == "perceiver_io") {
    c.num_latents = read.Int("num_latents", 1, 1 << 16, std::nullopt);
    c.num_outputs = read.Int("num_outputs", 1, 1 << 16, std::nullopt);
  }
  if (a == "perceiver_io" || a == "set_transformer") {
    c.output_dim = read.Int("output_dim", 1, kMaxVocab, std::nullopt);
  }
  if (a == "set_transformer") {
    c.num_inducing = read.Int("num_inducing", 0, 1 << 16, 0);
    c.num_seeds = read.Int("num_seeds", 1, 1 << 16, std::nullopt);
  }
  if (const Json* tokenizer = read.Object("tokenizer")) {
    FieldReader fields(*tokenizer, path + " tokenizer");
    c.tokenizer.type = fields.Choice<std::string>(
        "type", {{"byte", "byte"}, {"huggingface", "huggingface"}}, std::nullopt);
    c.tokenizer.end_of_text = fields.String("end_of_text", "");
    if (c.tokenizer.type == "huggingface") {
      c.tokenizer.file = fields.String("file", "tokenizer.json");
      // A file of the model directory: no way out of it.
      if (c.tokenizer.file.empty() || c.tokenizer.file.front() == '/' ||
          absl::StrContains(c.tokenizer.file, "..")) {
        fields.Fail("file", "must be a file name inside the model directory");
      }
    }
    if (c.tokenizer.type == "byte") {
      if (const Json* specials = fields.Object("special_tokens")) {
        for (const auto& [text, id] : specials->items()) {
          if (!id.is_number_integer() || id.get<int64_t>() < 256 ||
              id.get<int64_t>() >= std::max<int64_t>(c.vocab_size, 256)) {
            fields.Fail("special_tokens." + text, "must be an id in [256, vocab_size)");
          } else {
            c.tokenizer.special_tokens[text] = id.get<int64_t>();
          }
        }
      }
    }
    fields.RejectUnread();
    RETURN_IF_ERROR(fields.status());
  }
  read.RejectUnread();
  RETURN_IF_ERROR(read.status());

  if (c.token_inputs() == (c.input_dim > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": exactly one of vocab_size (token ids) and input_dim (feature "
                     "vectors) must be positive"));
  }
  if ((a == "causal_lm" || a == "next_word" || a == "seq2seq") && !c.token_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", a, " needs vocab_size"));
  }
  if ((a == "perceiver_io" || a == "set_transformer") && c.positions == PositionKind::kAlibi) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", a, " has no self-attention over its inputs for ALiBi"));
  }
  if (a == "set_transformer" && c.positions != PositionKind::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a set has no order: set_transformer needs positions \"none\""));
  }
  if (c.token_inputs() && c.tokenizer.type.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": field tokenizer is missing"));
  }
  if (c.attention == AttentionKind::kLinear && c.positions == PositionKind::kAlibi) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": positions \"alibi\" needs softmax or exclusive attention"));
  }
  if ((a == "perceiver_io" || a == "set_transformer") && c.positions == PositionKind::kRope) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", a, " has no self-attention over its inputs for rotary positions"));
  }
  // The attention settings every layer shares, checked once with the layer's own rules.
  AttentionConfig attention;
  attention.kind = c.attention;
  attention.model_dim = c.model_dim;
  attention.num_heads = c.num_heads;
  attention.num_kv_heads = c.num_kv_heads;
  attention.head_dim_qk = c.head_dim_qk;
  attention.head_dim_v = c.head_dim_v;
  attention.causal = a == "causal_lm" || c.attention_window > 0;
  attention.rotary = c.rotary;
  attention.window = c.attention_window;
  if (auto status = CheckAttentionConfig(attention); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", status.message()));
  }
  if (c.attention_window > 0 && a != "causal_lm") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": attention_window needs a causal_lm (a window over the past)"));
  }
  if (c.tie_embeddings && !c.token_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tie_embeddings needs vocab_size"));
  }
  return c;
}

}  // namespace attnserve
