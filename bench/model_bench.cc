// Loads a model directory and reports, as JSON: resident memory against the weight bytes,
// prefill time for a prompt, and per-token decode time at given contexts (medians).
// Usage: model_bench MODEL_DIR [--runs N]
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include "engine/architectures/model.h"

namespace attnserve {
namespace {

double ResidentMegabytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1.0;
}

template <typename Fn>
double MedianMs(int runs, Fn fn) {
  std::vector<double> times;
  fn();  // warm-up: primitive creation, page faults
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

TokenSequences RandomPrompts(int64_t batch, int64_t length, int64_t vocab) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> token(0, std::min<int64_t>(vocab, 256) - 1);
  TokenSequences prompts(batch);
  for (auto& prompt : prompts) {
    for (int64_t t = 0; t < length; ++t) prompt.push_back(token(rng));
  }
  return prompts;
}

int Run(const std::string& directory, int runs) {
  const double before = ResidentMegabytes();
  auto loaded = LoadModel(directory);
  if (!loaded.ok()) {
    std::cerr << loaded.status() << "\n";
    return 1;
  }
  const double after_load = ResidentMegabytes();
  struct stat info;
  stat((directory + "/model.safetensors").c_str(), &info);
  const double weight_mb = static_cast<double>(info.st_size) / (1024.0 * 1024.0);
  const CausalLM& lm = *(*loaded)->As<CausalLM>();
  const int64_t vocab = lm.config().vocab_size;

  std::printf("{\"weights_mb\": %.1f, \"rss_before_mb\": %.1f, \"rss_after_load_mb\": %.1f",
              weight_mb, before, after_load);
  for (auto [batch, length] : {std::pair<int64_t, int64_t>{1, 128}, {8, 128}, {1, 512}}) {
    const TokenSequences prompts = RandomPrompts(batch, length, vocab);
    const double ms = MedianMs(runs, [&] {
      std::vector<std::unique_ptr<DecoderState>> states;
      std::vector<DecoderState*> pointers;
      for (int64_t b = 0; b < batch; ++b) {
        states.push_back(lm.NewState(length + 1));
        pointers.push_back(states.back().get());
      }
      if (!lm.Advance(pointers, prompts).ok()) std::abort();
    });
    std::printf(", \"prefill_b%ld_t%ld_ms\": %.2f", batch, length, ms);
    // After the first prefill every weight page has been read and its state is freed: the
    // resident set is the model plus the engine's working memory.
    if (batch == 1 && length == 128) {
      std::printf(", \"rss_after_prefill_mb\": %.1f", ResidentMegabytes());
    }
  }
  for (int64_t context : {128, 512, 2048}) {
    if (context + runs + 2 > lm.config().max_positions) continue;
    auto state = lm.NewState(context + runs + 2);
    DecoderState* pointer = state.get();
    if (!lm.Advance({&pointer, 1}, RandomPrompts(1, context, vocab)).ok()) std::abort();
    const TokenSequences next = {{42}};
    const double ms = MedianMs(runs, [&] {
      if (!lm.Advance({&pointer, 1}, next).ok()) std::abort();
    });
    std::printf(", \"decode_context%ld_ms\": %.2f", context, ms);
  }
  std::printf(", \"rss_end_mb\": %.1f}\n", ResidentMegabytes());
  return 0;
}

}  // namespace
}  // namespace attnserve

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: model_bench MODEL_DIR [--runs N]\n";
    return 2;
  }
  const int runs = argc >= 4 && std::string(argv[2]) == "--runs" ? std::atoi(argv[3]) : 10;
  return attnserve::Run(argv[1], runs);
}
