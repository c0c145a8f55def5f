#include "engine/model/model_config.h"

#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve {
namespace {

using Json = nlohmann::json;

// Reads fields out of the config object, remembering the first error and every key it read.
class FieldReader {
 public:
  FieldReader(const Json& object, const std::string& path) : object_(object), path_(path) {}

  int64_t Int(const std::string& key, int64_t min, int64_t max, std::optional<int64_t> fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return Missing(key, fallback);
    if (!it->is_number_integer()) return Fail(key, "must be an integer"), 0;
    const int64_t value = it->get<int64_t>();
    if (value < min || value > max) {
      return Fail(key, absl::StrCat("is ", value, ", outside [", min, ", ", max, "]")), 0;
    }
    return value;
  }

  double Real(const std::string& key, double min, double max, double fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return fallback;
    if (!it->is_number()) return Fail(key, "must be a number"), 0.0;
    const double value = it->get<double>();
    if (!(value >= min && value <= max)) {
      return Fail(key, absl::StrCat("is ", value, ", outside [", min, ", ", max, "]")), 0.0;
    }
    return value;
  }

  bool Bool(const std::string& key, bool fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return fallback;
    if (!it->is_boolean()) return Fail(key, "must be true or false"), false;
    return it->get<bool>();
  }

  std::string String(const std::string& key, const std::string& fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return fallback;
    if (!it->is_string()) return Fail(key, "must be a string"), fallback;
    return it->get<std::string>();
  }

  template <typename Enum>
  Enum Choice(const std::string& key, const std::map<std::string, Enum>& choices,
              std::optional<std::string> fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    std::string value;
    if (it == object_.end()) {
      if (!fallback) return Fail(key, "is missing"), choices.begin()->second;
      value = *fallback;
    } else if (!it->is_string()) {
      return Fail(key, "must be a string"), choices.begin()->second;
    } else {
      value = it->get<std::string>();
    }
    auto choice = choices.find(value);
    if (choice == choices.end()) {
      std::vector<std::string> names;
      for (const auto& [name, unused] : choices) names.push_back(name);
      return Fail(key,
                  absl::StrCat("is \"", value, "\", expected one of ", absl::StrJoin(names, ", "))),
             choices.begin()->second;
    }
    return choice->second;
  }

  const Json* Object(const std::string& key) {
    read_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return nullptr;
    if (!it->is_object()) return Fail(key, "must be an object"), nullptr;
    return &*it;
  }

  void Fail(const std::string& key, const std::string& message) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(path_, ": field ", key, " ", message));
    }
  }

  // Keys nobody read are refused: a misspelled option must not be silently ignored.
  void RejectUnread() {
    for (const auto& [key, value] : object_.items()) {
      if (!read_.count(key)) Fail(key, "is not a known setting");
    }
  }

  const absl::Status& status() const { return status_; }

 private:
  int64_t Missing(const std::string& key, std::optional<int64_t> fallback) {
    if (fallback) return *fallback;
    Fail(key, "is missing");
    return 0;
  }

  const Json& object_;
  std::string path_;
  std::set<std::string> read_;
  absl::Status status_;
};

constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxVocab = 1 << 22;

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
  c.head_dim_qk = read.Int("head_dim_qk", 1, kMaxDim, std::nullopt);
  c.head_dim_v = read.Int("head_dim_v", 1, kMaxDim, std::nullopt);
  c.ffn_dim = read.Int("ffn_dim", 1, 1 << 20, std::nullopt);
  c.activation = read.Choice<Activation>("activation",
                                         {{"relu", Activation::kRelu},
                                          {"gelu", Activation::kGeluErf},
                                          {"gelu_tanh", Activation::kGeluTanh}},
                                         "gelu");
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
  c.positions = read.Choice<PositionKind>("positions",
                                          {{"sinusoidal", PositionKind::kSinusoidal},
                                           {"learned", PositionKind::kLearned},
                                           {"alibi", PositionKind::kAlibi},
                                           {"none", PositionKind::kNone}},
                                          "sinusoidal");
  c.max_positions = read.Int("max_positions", 1, 1 << 24, std::nullopt);
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
    if (!fields.status().ok()) return fields.status();
  }
  read.RejectUnread();
  if (!read.status().ok()) return read.status();

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
  if (c.tie_embeddings && !c.token_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tie_embeddings needs vocab_size"));
  }
  return c;
}

}  // namespace attnserve
