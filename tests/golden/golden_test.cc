// Runs the engine on every golden case written by python/tests/make_golden.py and compares with
// the PyTorch reference (computed in float64) within 1e-4 absolute and relative.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "engine/architectures/model.h"
#include "engine/attention/head_contributions.h"
#include "engine/attention/multi_head.h"
#include "engine/attention/pointer.h"
#include "engine/attention/simple_self.h"
#include "engine/kernels/activations.h"
#include "engine/kernels/alibi.h"
#include "engine/kernels/embedding.h"
#include "engine/kernels/normalization.h"
#include "engine/kernels/softmax.h"
#include "engine/safetensors.h"
#include "tests/tensor_compare.h"

namespace attnserve {
namespace {

using ::attnserve::testing::AllClose;

std::string GoldenDir() {
  const char* dir = std::getenv("ATTNSERVE_GOLDEN_DIR");
  return dir != nullptr ? dir : ATTNSERVE_GOLDEN_DIR;
}

std::vector<std::string> GoldenCases() {
  std::vector<std::string> names;
  if (!std::filesystem::is_directory(GoldenDir())) return names;
  for (const auto& entry : std::filesystem::directory_iterator(GoldenDir())) {
    if (entry.path().extension() == ".safetensors") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Accessors that fail the test (rather than crash) on a malformed case.
class Case {
 public:
  explicit Case(SafetensorsFile file) : file_(std::move(file)) {}

  Tensor Float(const std::string& name) const {
    auto tensor = file_.Float32(name);
    EXPECT_TRUE(tensor.ok()) << tensor.status();
    return tensor.ok() ? *tensor : Tensor();
  }
  Tensor Optional(const std::string& name) const { return Contains(name) ? Float(name) : Tensor(); }
  bool Contains(const std::string& name) const { return file_.contains(name); }
  std::vector<int64_t> Ints(const std::string& name) const {
    auto values = file_.Integers(name);
    EXPECT_TRUE(values.ok()) << values.status();
    return values.ok() ? *values : std::vector<int64_t>();
  }
  bool Has(const std::string& key) const { return file_.metadata().count(key) > 0; }
  std::string Text(const std::string& key) const {
    auto it = file_.metadata().find(key);
    EXPECT_NE(it, file_.metadata().end()) << "metadata " << key;
    return it == file_.metadata().end() ? "" : it->second;
  }
  int64_t Int(const std::string& key) const {
    int64_t value = 0;
    EXPECT_TRUE(absl::SimpleAtoi(Text(key), &value)) << key;
    return value;
  }
  float Real(const std::string& key) const {
    float value = 0;
    EXPECT_TRUE(absl::SimpleAtof(Text(key), &value)) << key;
    return value;
  }

 private:
  SafetensorsFile file_;
};

void CheckAttention(const Case& c) {
  AttentionConfig config;
  const std::string kind = c.Text("kind");
  config.kind = kind == "linear"      ? AttentionKind::kLinear
                : kind == "exclusive" ? AttentionKind::kExclusive
                                      : AttentionKind::kSoftmax;
  config.model_dim = c.Int("model_dim");
  config.memory_dim = c.Int("memory_dim");
  config.num_heads = c.Int("num_heads");
  config.head_dim_qk = c.Int("head_dim_qk");
  config.head_dim_v = c.Int("head_dim_v");
  config.output_dim = c.Int("output_dim");
  config.causal = c.Int("causal") != 0;
  config.alibi = c.Int("alibi") != 0;
  config.feature_map = c.Text("feature_map") == "exp" ? FeatureMap::kExp : FeatureMap::kEluPlusOne;
  if (c.Has("num_kv_heads")) {  // the grouped-query cases, with rotary positions and windows
    config.num_kv_heads = c.Int("num_kv_heads");
    config.window = c.Int("window");
    RotaryConfig& rotary = config.rotary;
    rotary.dims = c.Int("rope_dims");
    rotary.theta = c.Real("rope_theta");
    rotary.interleaved = c.Int("rope_interleaved") != 0;
    const std::string scaling = c.Text("rope_scaling");
    rotary.scaling = scaling == "linear"    ? RopeScaling::kLinear
                     : scaling == "dynamic" ? RopeScaling::kDynamic
                     : scaling == "llama3"  ? RopeScaling::kLlama3
                                            : RopeScaling::kNone;
    rotary.factor = c.Real("rope_factor");
    rotary.low_freq_factor = c.Real("rope_low_freq_factor");
    rotary.high_freq_factor = c.Real("rope_high_freq_factor");
    rotary.original_max_positions = c.Int("rope_original_max_positions");
  }
  AttentionWeights weights{c.Float("q_proj.weight"),   c.Optional("q_proj.bias"),
                           c.Float("k_proj.weight"),   c.Optional("k_proj.bias"),
                           c.Float("v_proj.weight"),   c.Optional("v_proj.bias"),
                           c.Float("out_proj.weight"), c.Optional("out_proj.bias")};
  auto layer = MultiHeadAttention::Create(config, weights);
  ASSERT_TRUE(layer.ok()) << layer.status();

  PaddedBatch x{c.Float("x"), c.Ints("x_lengths")};
  PaddedBatch memory;
  if (config.is_cross()) memory = {c.Float("memory"), c.Ints("memory_lengths")};
  Tensor heads;
  auto output = layer->Forward(x, config.is_cross() ? &memory : nullptr, &heads);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_TRUE(AllClose(*output, c.Float("output")));

  auto contributions = HeadContributions(heads, weights.out_weight, config.num_heads);
  ASSERT_TRUE(contributions.ok()) << contributions.status();
  EXPECT_TRUE(AllClose(*contributions, c.Float("head_contributions")));
}

void CheckSimple(const Case& c) {
  auto output = SimpleSelfAttention({c.Float("x"), c.Ints("x_lengths")}, c.Int("scaled") != 0,
                                    c.Int("causal") != 0);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_TRUE(AllClose(*output, c.Float("output")));
}

void CheckPointer(const Case& c) {
  auto layer = PointerAttention::Create(
      {c.Float("memory_proj.weight"), c.Float("query_proj.weight"), c.Float("score.weight")});
  ASSERT_TRUE(layer.ok()) << layer.status();
  auto output = layer->Forward({c.Float("queries"), c.Ints("x_lengths")},
                               {c.Float("memory"), c.Ints("memory_lengths")});
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_TRUE(AllClose(*output, c.Float("output")));
}

void CheckNorm(const Case& c, const std::string& variant) {
  const Tensor x = c.Float("x");
  Tensor y(x.shape());
  absl::Status status;
  if (variant == "layer_norm") {
    status = LayerNorm(x, c.Float("gamma"), c.Float("beta"), c.Real("eps"), y);
  } else if (variant == "rms_norm") {
    status = RmsNorm(x, c.Float("gain"), c.Real("eps"), y);
  } else {
    status = ScaleNorm(x, c.Real("g"), c.Real("eps"), y);
  }
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(AllClose(y, c.Float("output")));
}

void CheckActivation(const Case& c) {
  Tensor y = c.Float("x").Clone();
  const std::string function = c.Text("function");
  const std::map<std::string, void (*)(float*, int64_t)> functions = {
      {"relu", ReluInPlace},
      {"gelu_erf", GeluErfInPlace},
      {"gelu_tanh", GeluTanhInPlace},
      {"elu_plus_one", EluPlusOneInPlace},
      {"exp", ExpInPlace}};
  ASSERT_TRUE(functions.count(function)) << function;
  functions.at(function)(y.data(), y.size());
  EXPECT_TRUE(AllClose(y, c.Float("output")));
}

void CheckSoftmax(const Case& c) {
  const Tensor x = c.Float("x");
  const std::vector<int64_t> lengths = c.Ints("lengths");
  Tensor probs = x.Clone(), log_probs = x.Clone();
  for (int64_t r = 0; r < x.dim(0); ++r) {
    MaskedSoftmaxRow(probs.row(r), lengths[r], x.dim(1));
    MaskedLogSoftmaxRow(log_probs.row(r), lengths[r], x.dim(1));
  }
  EXPECT_TRUE(AllClose(probs, c.Float("output")));
  EXPECT_TRUE(AllClose(log_probs, c.Float("log_output")));
}

void CheckSinusoidal(const Case& c) {
  EXPECT_TRUE(AllClose(SinusoidalPositions(c.Int("positions"), c.Int("dim")), c.Float("output")));
}

void CheckAlibi(const Case& c) {
  for (int heads : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 48}) {
    std::vector<float> slopes = AlibiSlopes(heads);
    Tensor actual = Tensor::Wrap(slopes.data(), {heads}, nullptr);
    EXPECT_TRUE(AllClose(actual, c.Float("slopes_" + std::to_string(heads)), 0.0f, 1e-6f))
        << heads << " heads";
  }
}

void CheckEmbedding(const Case& c) {
  const std::vector<int64_t> ids = c.Ints("ids");
  Tensor rows({static_cast<int64_t>(ids.size()), c.Float("table").dim(1)});
  ASSERT_TRUE(EmbedTokens(c.Float("table"), ids, rows).ok());
  EXPECT_TRUE(AllClose(rows, c.Float("output")));

  Tensor x = c.Float("x").Clone();
  ASSERT_TRUE(AddPositions(c.Float("positions"), c.Ints("x_lengths"), c.Int("start"), x).ok());
  EXPECT_TRUE(AllClose(x, c.Float("positioned")));
}

TokenSequences SequencesOf(const Case& c, const std::string& ids_name = "inputs",
                           const std::string& lengths_name = "lengths") {
  const std::vector<int64_t> ids = c.Ints(ids_name), lengths = c.Ints(lengths_name);
  const int64_t time = lengths.empty() ? 0 : static_cast<int64_t>(ids.size() / lengths.size());
  TokenSequences sequences;
  for (size_t b = 0; b < lengths.size(); ++b) {
    sequences.emplace_back(ids.begin() + b * time, ids.begin() + b * time + lengths[b]);
  }
  return sequences;
}

// Decoding in steps must give the logits of the full pass within 1e-5: first half of every
// sequence, then one token at a time, sequences leaving the batch as they run out.
// advance(states, tokens) is the model's batched Advance.
template <typename State, typename Advance>
void CheckDecodingInSteps(const TokenSequences& sequences,
                          std::vector<std::unique_ptr<State>> states, Advance advance,
                          const Tensor& full_logits) {
  std::vector<size_t> fed(sequences.size(), 0);
  for (bool first = true;; first = false) {
    std::vector<State*> batch;
    std::vector<size_t> members;
    TokenSequences step;
    for (size_t b = 0; b < sequences.size(); ++b) {
      if (fed[b] == sequences[b].size()) continue;
      const size_t count = first ? (sequences[b].size() + 1) / 2 : 1;
      step.emplace_back(sequences[b].begin() + fed[b], sequences[b].begin() + fed[b] + count);
      batch.push_back(states[b].get());
      members.push_back(b);
      fed[b] += count;
    }
    if (members.empty()) break;
    absl::StatusOr<Tensor> logits = advance(batch, step);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (size_t i = 0; i < members.size(); ++i) {
      const size_t b = members[i];
      EXPECT_TRUE(AllClose(logits->Slice(0, i, 1), full_logits.Select(b).Slice(0, fed[b] - 1, 1),
                           1e-5f, 1e-5f))
          << "sequence " << b << " after " << fed[b] << " tokens";
    }
  }
}

void CheckIncrementalDecoding(const CausalLM& lm, const TokenSequences& sequences,
                              const Tensor& full_logits) {
  std::vector<std::unique_ptr<DecoderState>> states;
  for (size_t b = 0; b < sequences.size(); ++b) states.push_back(lm.NewState(64));
  CheckDecodingInSteps(
      sequences, std::move(states),
      [&](const std::vector<DecoderState*>& batch, const TokenSequences& step) {
        return lm.Advance(batch, step);
      },
      full_logits);
}

void CheckSeq2SeqDecoding(const Seq2Seq& model, const TokenSequences& sources,
                          const TokenSequences& targets, const Tensor& full_logits) {
  std::vector<std::unique_ptr<Seq2SeqState>> states;
  for (const auto& source : sources) {
    auto state = model.Start(source, 64);
    ASSERT_TRUE(state.ok()) << state.status();
    states.push_back(*std::move(state));
  }
  CheckDecodingInSteps(
      targets, std::move(states),
      [&](const std::vector<Seq2SeqState*>& batch, const TokenSequences& step) {
        return model.Advance(batch, step);
      },
      full_logits);
}

void CheckModel(const Case& c, const std::string& case_name) {
  const std::string directory = GoldenDir() + "/" + case_name.substr(0, case_name.find('.'));
  auto model = LoadModel(directory);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int64_t> lengths = c.Ints("lengths");
  ModelInputs inputs;
  if ((*model)->config.token_inputs()) {
    inputs.tokens = SequencesOf(c);
    if (c.Contains("token_types")) {
      for (const std::vector<int64_t>& types : SequencesOf(c, "token_types")) {
        inputs.token_types.emplace_back(types.begin(), types.end());
      }
    }
  } else {
    inputs.features = {c.Float("inputs"), lengths};
  }
  const Model& m = **model;
  // Through the interface the server uses.
  if (m.As<NextWordModel>()) {
    auto logits = m.servable->NextTokenLogits({}, inputs.tokens);
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_TRUE(AllClose(*logits, c.Float("output")));
    return;
  }
  if (m.As<PerceiverIO>() || m.As<SetTransformer>()) {
    auto output = m.servable->Embed(inputs, std::nullopt, {});
    ASSERT_TRUE(output.ok()) << output.status();
    EXPECT_TRUE(AllClose(output->values, c.Float("output")));
    return;
  }
  if (m.As<Seq2Seq>()) {
    const TokenSequences targets = SequencesOf(c, "targets", "target_lengths");
    auto logits = m.As<Seq2Seq>()->Logits(inputs.tokens, targets);
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_TRUE(AllClose(*logits, c.Float("logits")));
    CheckSeq2SeqDecoding(*m.As<Seq2Seq>(), inputs.tokens, targets, *logits);
    return;
  }
  if (m.As<CausalLM>()) {
    const CausalLM& lm = *m.As<CausalLM>();
    auto logits = lm.Logits(inputs.tokens);
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_TRUE(AllClose(*logits, c.Float("logits")));
    CheckIncrementalDecoding(lm, inputs.tokens, *logits);
    return;
  }
  const Encoder& encoder = *m.As<Encoder>();
  auto states = encoder.States(inputs);
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_TRUE(AllClose(states->values, c.Float("states")));
  auto embedding = encoder.Embed(inputs);
  ASSERT_TRUE(embedding.ok()) << embedding.status();
  EXPECT_TRUE(AllClose(*embedding, c.Float("embedding")));
  EXPECT_EQ(m.config.classifier.num_labels > 0, c.Contains("logits"));
  if (c.Contains("logits")) {
    EXPECT_TRUE(m.servable->Answers(ModelMethod::kClassify));
    auto logits = m.servable->Classify(inputs);
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_TRUE(AllClose(*logits, c.Float("logits")));
  }
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesReference) {
  auto file = SafetensorsFile::Open(GoldenDir() + "/" + GetParam() + ".safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  const Case c(*std::move(file));
  const std::string variant = c.Text("variant");
  if (variant == "attention") return CheckAttention(c);
  if (variant == "simple") return CheckSimple(c);
  if (variant == "pointer") return CheckPointer(c);
  if (variant == "layer_norm" || variant == "rms_norm" || variant == "scale_norm") {
    return CheckNorm(c, variant);
  }
  if (variant == "activation") return CheckActivation(c);
  if (variant == "softmax") return CheckSoftmax(c);
  if (variant == "sinusoidal") return CheckSinusoidal(c);
  if (variant == "alibi") return CheckAlibi(c);
  if (variant == "embedding") return CheckEmbedding(c);
  if (variant == "model") return CheckModel(c, GetParam());
  FAIL() << "unknown golden variant " << variant;
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenTest, ::testing::ValuesIn(GoldenCases()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// An empty or missing golden directory must fail loudly, not pass with zero cases.
TEST(GoldenSuite, HasCasesOfEveryVariant) {
  const std::vector<std::string> cases = GoldenCases();
  for (const char* prefix :
       {"attention_", "attention_gqa_", "model_causal_lm_rope_", "model_causal_lm_window_",
        "simple_", "pointer_", "kernel_layer_norm", "kernel_rms_norm", "kernel_scale_norm",
        "kernel_activation", "kernel_softmax", "kernel_sinusoidal", "kernel_alibi",
        "kernel_embedding"}) {
    EXPECT_TRUE(std::any_of(cases.begin(), cases.end(),
                            [&](const std::string& name) { return name.rfind(prefix, 0) == 0; }))
        << "no golden case starting with " << prefix << " in " << GoldenDir();
  }
}

}  // namespace
}  // namespace attnserve
