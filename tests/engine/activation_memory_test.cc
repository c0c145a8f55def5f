// The admission estimate of a forward pass's memory (engine/architectures/activation_memory.h)
// against the tensor memory the pass really allocates at its peak, for every architecture of the
// golden grid and for the demo model: never below it, and not wastefully above it.
#include "engine/architectures/activation_memory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "engine/architectures/model.h"

namespace attnserve {
namespace {

constexpr int64_t kBatch = 3, kTime = 40;

TokenSequences RandomSequences(int64_t vocab, std::mt19937_64& rng) {
  TokenSequences sequences;
  for (int64_t b = 0; b < kBatch; ++b) {
    std::vector<int64_t> ids(kTime - 7 * b);
    for (auto& id : ids) id = static_cast<int64_t>(rng() % vocab);
    sequences.push_back(ids);
  }
  return sequences;
}

// Runs what the server runs for the model's RPCs, the most demanding call of each kind, and
// returns {measured peak, estimate} for each.
std::vector<std::pair<int64_t, int64_t>> MeasureCalls(const Model& model) {
  std::mt19937_64 rng(7);
  const ModelConfig& c = model.config;
  std::vector<std::pair<int64_t, int64_t>> results;
  const auto measure = [&](const EngineCall& call, const auto& run) {
    ResetTensorPeakBytes();
    const int64_t before = TensorBytesInUse();
    auto status = run();
    EXPECT_TRUE(status.ok()) << status.status();
    results.push_back({TensorPeakBytes() - before, ActivationBytes(c, call)});
  };
  const TokenSequences tokens =
      c.token_inputs() ? RandomSequences(c.vocab_size, rng) : TokenSequences();
  ModelInputs inputs;
  if (c.token_inputs()) {
    inputs.tokens = tokens;
  } else {
    inputs.features = {Tensor::Zeros({kBatch, kTime, c.input_dim}), {kTime, kTime - 7, kTime - 14}};
  }
  if (model.As<CausalLM>()) {
    measure({.batch = kBatch, .time = kTime, .logits_rows = kBatch * kTime},
            [&] { return model.As<CausalLM>()->Logits(tokens); });
    measure({.batch = kBatch, .time = kTime, .logits_rows = kBatch},
            [&] { return model.As<CausalLM>()->LastLogits(tokens); });
  } else if (model.As<Seq2Seq>()) {
    measure({.batch = kBatch, .time = kTime, .source_time = kTime, .logits_rows = kBatch * kTime},
            [&] { return model.As<Seq2Seq>()->Logits(tokens, tokens); });
  } else if (model.As<Encoder>()) {
    std::map<int64_t, Tensor> heads;
    for (int64_t layer = 0; layer < c.num_layers; ++layer) heads[layer] = Tensor();
    measure({.batch = kBatch, .time = kTime, .head_layers = c.num_layers},
            [&] { return model.As<Encoder>()->States(inputs, &heads); });
  } else if (model.As<NextWordModel>()) {
    measure({.batch = kBatch, .time = kTime, .logits_rows = kBatch},
            [&] { return model.As<NextWordModel>()->Logits(tokens); });
  } else if (model.As<PerceiverIO>()) {
    measure({.batch = kBatch, .time = kTime},
            [&] { return model.As<PerceiverIO>()->Forward(inputs); });
  } else if (model.As<SetTransformer>()) {
    measure({.batch = kBatch, .time = kTime},
            [&] { return model.As<SetTransformer>()->Forward(inputs); });
  }
  return results;
}

void ExpectBounded(const std::string& name, const Model& model) {
  // Int8 weights: the estimate also holds the tile of dequantized weights, which the calling
  // thread allocates once and keeps (not a tensor).
  const int64_t tile = model.config.weights.quantized
                           ? ActivationBytes(model.config, {}) - ActivationBytes(ModelConfig{}, {})
                           : 0;
  for (const auto& [measured, estimate] : MeasureCalls(model)) {
    EXPECT_GT(measured, 0) << name;
    EXPECT_GE(estimate - tile, measured) << name;
    // Within 4x, besides the fixed megabyte of slack (the golden models' heads are 4 to 13
    // wide, and the estimate counts each padded to the kernel's 16-column tiles).
    EXPECT_LE(estimate - tile - (1 << 20), 4 * measured) << name << ": measured " << measured;
  }
}

// Every architecture and variant of the golden grid, with float32 weights and with int8.
TEST(ActivationMemoryTest, CoversEveryGoldenArchitecture) {
  for (const bool int8 : {false, true}) {
    int models = 0;
    for (const auto& entry : std::filesystem::directory_iterator(ATTNSERVE_GOLDEN_DIR)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_directory() || name.rfind("model_", 0) != 0) continue;
      LoadOptions options;
      options.weights.quantized = int8;
      auto model = LoadModel(entry.path().string(), options);
      ASSERT_TRUE(model.ok()) << model.status();
      ExpectBounded(name + (int8 ? " (int8)" : ""), **model);
      ++models;
    }
    EXPECT_GT(models, 50);
  }
}

TEST(ActivationMemoryTest, CoversTheDemoModel) {
  auto model = LoadModel(ATTNSERVE_SOURCE_DIR "/models/demo");
  ASSERT_TRUE(model.ok()) << model.status();
  ExpectBounded("demo", **model);
}

}  // namespace
}  // namespace attnserve
