// The engine's own time for one NextToken request (a prefill of the prompt without a KV cache,
// then the logits of the last token: the call the server makes): what the server adds is measured
// against this. Usage: engine_next_token MODEL_DIR PROMPT_TOKENS [RUNS [BATCH]] -> the median
// milliseconds of one engine call on BATCH such prompts (default 1)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "engine/architectures/model.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: engine_next_token MODEL_DIR PROMPT_TOKENS [RUNS [BATCH]]\n";
    return 2;
  }
  auto model = attnserve::LoadModel(argv[1]);
  if (!model.ok() || !(*model)->As<attnserve::CausalLM>()) {
    std::cerr << "needs a causal_lm model: " << model.status() << "\n";
    return 1;
  }
  const attnserve::CausalLM& lm = *(*model)->As<attnserve::CausalLM>();
  const int64_t length = std::atoll(argv[2]);
  const int runs = argc > 3 ? std::atoi(argv[3]) : 200;
  const int batch = argc > 4 ? std::atoi(argv[4]) : 1;
  const attnserve::TokenSequences prompts(batch, std::vector<int64_t>(length, 'a'));
  std::vector<double> times;
  for (int i = 0; i < runs + 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (!lm.LastLogits(prompts).ok()) return 1;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i >= 5) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  std::printf("%.4f\n", times[times.size() / 2]);
  return 0;
}
