// Times the engine's tokenizer.json encoding, one thread, for bench/tokenizer_bench.py:
//   tokenizer_speed TOKENIZER_JSON TEXTS_JSONL ROUNDS
// encodes every text (one JSON string per line) ROUNDS times after a warm-up round and prints a
// JSON object: tokens per round, the best round's seconds, and the peak resident memory.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/hf_tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: tokenizer_speed TOKENIZER_JSON TEXTS_JSONL ROUNDS\n";
    return 1;
  }
  auto tokenizer = attnserve::HfTokenizer::FromFile(argv[1]);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status() << "\n";
    return 2;
  }
  std::vector<std::string> texts;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    texts.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  const int rounds = std::stoi(argv[3]);
  int64_t tokens = 0;
  double best = 1e30;
  for (int round = -1; round < rounds; ++round) {
    tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& text : texts) {
      auto encoding = tokenizer->Encode(text);
      if (!encoding.ok()) {
        std::cerr << encoding.status() << "\n";
        return 3;
      }
      tokens += static_cast<int64_t>(encoding->ids.size());
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round >= 0) best = std::min(best, seconds);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::cout << nlohmann::json{{"tokens", tokens},
                              {"seconds", best},
                              {"max_rss_kib", usage.ru_maxrss}}
                   .dump()
            << "\n";
  return 0;
}
