// The engine's side of the comparison suite (bench/compare/): loads one exported model
// directory, proves it computes what the PyTorch reference computed (check.json and the
// check_*.bin files written by bench/compare/models.py), then times the requested cases and
// prints {"case": median ms, ...}.
//
// Usage: engine_runner MODEL_DIR [--runs N] [--cases prefill:1x128,decode:512,...] [--check 0]
//                      [--weights int8] [--int8_group_size G] [--kv_cache float32|f16|bf16]
//   (--check 0 skips the check: for profiling a directory without check files; with int8
//   weights the check allows the quantization's error, 5% of the largest logit)
//   prefill:BxT  B prompts of T tokens (or T feature vectors): causal LMs feed fresh states and
//                return the last position's logits; Perceiver IO and Set Transformer run forward
//   decode:C     one token fed to a batch-1 state already holding C tokens (causal LMs)
//   decode:BxC   one token fed to each of B states already holding C tokens: a step of B
//                streams decoding together
//   The KV cache is the server's default unless --kv_cache says otherwise: f16 with int8
//   weights, float32 with float32 weights.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/architectures/model.h"
#include "engine/matmul.h"

namespace attnserve {
namespace {

template <typename Fn>
double MedianMs(int runs, Fn fn) {
  for (int i = 0; i < 2; ++i) fn();  // warm-up: primitive creation, page faults
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void Require(bool condition, const std::string& message) {
  if (!condition) {
    std::cerr << "engine_runner: " << message << "\n";
    std::exit(1);
  }
}

template <typename T>
T Value(absl::StatusOr<T> result, const std::string& what) {
  Require(result.ok(), what + ": " + result.status().ToString());
  return *std::move(result);
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  Require(file.good(), "cannot read " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), {});
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

void CheckClose(const Tensor& actual, const std::vector<float>& expected, const std::string& what,
                float tolerance) {
  const Tensor dense = actual.Clone();
  Require(dense.size() == static_cast<int64_t>(expected.size()),
          what + ": " + std::to_string(dense.size()) + " values, the reference has " +
              std::to_string(expected.size()));
  float largest = 1.0f, worst = 0.0f;
  for (size_t i = 0; i < expected.size(); ++i) {
    largest = std::max(largest, std::abs(expected[i]));
    worst = std::max(worst, std::abs(dense.data()[i] - expected[i]));
  }
  Require(worst <= tolerance * largest, what + " differs from the reference by " +
                                            std::to_string(worst) + " (max |expected| " +
                                            std::to_string(largest) + ")");
  std::cerr << what << " matches the reference: max |diff| " << worst << "\n";
}

PaddedBatch Features(int64_t batch, int64_t length, int64_t width, const float* values) {
  PaddedBatch features{Tensor({batch, length, width}), std::vector<int64_t>(batch, length)};
  std::copy(values, values + features.values.size(), features.values.data());
  return features;
}

PaddedBatch RandomFeatures(int64_t batch, int64_t length, int64_t width) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> values(batch * length * width);
  for (float& v : values) v = normal(rng);
  return Features(batch, length, width, values.data());
}

TokenSequences RandomTokens(int64_t batch, int64_t length) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> token(0, 255);
  TokenSequences tokens(batch, std::vector<int64_t>(length));
  for (auto& sequence : tokens) {
    for (auto& t : sequence) t = token(rng);
  }
  return tokens;
}

// `batch` fresh states with room for `capacity` tokens each, in a pool of their own.
struct States {
  std::unique_ptr<KvBlockPool> pool;
  std::vector<std::unique_ptr<DecoderState>> owned;
  std::vector<DecoderState*> pointers;
  States(const CausalLM& lm, int64_t batch, int64_t capacity, KvCacheType type) {
    KvBlockShape shape = *lm.CacheShape(32);
    shape.type = type;
    pool = Value(KvBlockPool::Create(shape, batch * shape.BlocksFor(capacity)), "KV pool");
    for (int64_t b = 0; b < batch; ++b) {
      owned.push_back(lm.NewState(pool.get()));
      Require(owned.back()->table->Reserve(capacity), "KV pool too small");
      pointers.push_back(owned.back().get());
    }
  }
};

Tensor RunFeatures(const Model& model, const ModelInputs& inputs) {
  if (const auto* perceiver = model.As<PerceiverIO>()) {
    return Value(perceiver->Forward(inputs), "forward");
  }
  return Value(model.As<SetTransformer>()->Forward(inputs), "forward");
}

void Check(const Model& model, const std::string& directory) {
  const float tolerance = model.config.weights.quantized ? 5e-2f : 1e-3f;
  std::ifstream file(directory + "/check.json");
  Require(file.good(), "cannot read " + directory + "/check.json");
  const auto check = nlohmann::json::parse(file);
  const int64_t batch = check["batch"], length = check["length"];
  const std::vector<float> expected = ReadFloats(directory + "/check_output.bin");
  if (model.As<CausalLM>()) {
    const CausalLM& lm = *model.As<CausalLM>();
    const auto ids = check["ids"].get<std::vector<int64_t>>();
    TokenSequences prompts(batch);
    for (int64_t b = 0; b < batch; ++b) {
      prompts[b].assign(ids.begin() + b * length, ids.begin() + (b + 1) * length);
    }
    States states(lm, batch, length + 1, KvCacheType::kFloat32);
    CheckClose(Value(lm.Advance(states.pointers, prompts), "prefill"), expected, "prefill",
               tolerance);
    // The decode check: the first prompt's state, one more token.
    const TokenSequences next = {{check["decode_token"].get<int64_t>()}};
    CheckClose(Value(lm.Advance({&states.pointers[0], 1}, next), "decode"),
               ReadFloats(directory + "/check_decode_output.bin"), "decode", tolerance);
  } else {
    const auto inputs = check["inputs"].get<std::vector<float>>();
    const int64_t width = static_cast<int64_t>(inputs.size()) / (batch * length);
    ModelInputs model_inputs{{}, Features(batch, length, width, inputs.data())};
    CheckClose(RunFeatures(model, model_inputs), expected, "forward", tolerance);
  }
}

double TimeCase(const Model& model, const std::string& name, int runs, KvCacheType kv_cache) {
  const auto colon = name.find(':');
  const std::string kind = name.substr(0, colon), shape = name.substr(colon + 1);
  if (kind == "prefill") {
    const int64_t batch = std::stoll(shape), length = std::stoll(shape.substr(shape.find('x') + 1));
    if (model.As<CausalLM>()) {
      const TokenSequences prompts = RandomTokens(batch, length);
      return MedianMs(runs, [&] {
        States states(*model.As<CausalLM>(), batch, length, kv_cache);
        Value(model.As<CausalLM>()->Advance(states.pointers, prompts), name);
      });
    }
    const ModelInputs inputs{{}, RandomFeatures(batch, length, model.config.input_dim)};
    return MedianMs(runs, [&] { RunFeatures(model, inputs); });
  }
  Require(kind == "decode" && model.As<CausalLM>(), "unknown case " + name);
  const CausalLM& lm = *model.As<CausalLM>();
  const bool batched = shape.find('x') != std::string::npos;
  const int64_t batch = batched ? std::stoll(shape) : 1;
  const int64_t context = std::stoll(batched ? shape.substr(shape.find('x') + 1) : shape);
  // Each timed step adds a token, so the context ends runs + 2 tokens longer than it starts.
  States states(lm, batch, context + runs + 3, kv_cache);
  Value(lm.Advance(states.pointers, RandomTokens(batch, context)), name);
  const TokenSequences next(batch, std::vector<int64_t>{42});
  return MedianMs(runs, [&] { Value(lm.Advance(states.pointers, next), name); });
}

int Run(const std::string& directory, int runs, const std::string& cases, bool check,
        const LoadOptions& options, std::optional<KvCacheType> kv_cache) {
  const auto model = Value(LoadModel(directory, options), "loading " + directory);
  // What the loaded weights keep resident (the file's pages of packed or quantized weights are
  // released once copied).
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  std::cerr << "resident after loading: " << (resident * 4096 >> 20) << " MiB\n";
  if (options.weights.quantized) {
    std::cerr << "int8 prefill tiles: " << Int8TileFormatName(BestInt8TileFormat()) << "\n";
  }
  if (check) Check(*model, directory);
  std::printf("{");
  std::stringstream list(cases);
  std::string name;
  for (bool first = true; std::getline(list, name, ','); first = false) {
    const double ms = TimeCase(
        *model, name, runs,
        kv_cache.value_or(options.weights.quantized ? KvCacheType::kF16 : KvCacheType::kFloat32));
    std::printf("%s\"%s\": %.3f", first ? "" : ", ", name.c_str(), ms);
    std::fflush(stdout);
    std::cerr << name << ": " << ms << " ms\n";
  }
  std::printf("}\n");
  return 0;
}

}  // namespace
}  // namespace attnserve

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: engine_runner MODEL_DIR [--runs N] [--cases CASE,...] [--check 0] "
                 "[--weights float32|int8] [--int8_group_size G] [--kv_cache float32|f16|bf16]\n";
    return 2;
  }
  int runs = 10;
  std::string cases;
  bool check = true;
  attnserve::LoadOptions options;
  std::optional<attnserve::KvCacheType> kv_cache;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--runs") {
      runs = std::atoi(argv[i + 1]);
    } else if (flag == "--cases") {
      cases = argv[i + 1];
    } else if (flag == "--check") {
      check = std::string(argv[i + 1]) != "0";
    } else if (flag == "--weights") {
      const std::optional<attnserve::WeightFormat> format =
          attnserve::WeightFormatNamed(argv[i + 1], options.weights);
      if (!format) {
        std::cerr << "--weights: float32, bf16, int8, int4 or auto\n";
        return 2;
      }
      options.weights = *format;
    } else if (flag == "--kv_cache") {
      const std::optional<attnserve::KvCacheType> type = attnserve::KvCacheTypeNamed(argv[i + 1]);
      if (!type) {
        std::cerr << "--kv_cache: float32, f16 or bf16\n";
        return 2;
      }
      kv_cache = *type;
    } else if (flag == "--int8_group_size") {
      options.weights.group_size = std::atoll(argv[i + 1]);
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  return attnserve::Run(argv[1], runs, cases, check, options, kv_cache);
}
