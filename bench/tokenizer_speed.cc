// Times the engine's tokenizer.json encoding, one thread, for bench/tokenizer_bench.py:
//   tokenizer_speed TOKENIZER_JSON TEXTS_JSONL ROUNDS
// encodes every text (one JSON string per line) ROUNDS times after a first round and prints a
// JSON object: tokens per round, the first round's seconds (every text new to the tokenizer's word
// cache: "first_seconds"), the best later round's seconds (the cache full), and how much the peak
// resident memory grew over the encoding (past what loading took). It also
// streams every text's ids back through TextStream, as the scheduler thread does for a
// generation, and gives the best round's seconds for that ("stream_seconds").
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/tokenizer/hf_tokenizer.h"
#include "text/tokenizer/text_stream.h"

// The peak resident memory so far.
int64_t PeakKib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// Seconds since `start`; a warm-up round (-1) counts as never best.
double Seconds(std::chrono::steady_clock::time_point start, int round) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return round >= 0 ? seconds : 1e30;
}

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
  const int64_t loaded_kib = PeakKib();
  int64_t tokens = 0;
  double best = 1e30, first = 0;
  std::vector<std::vector<int64_t>> ids(texts.size());
  for (int round = -1; round < rounds; ++round) {
    tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < texts.size(); ++i) {
      auto encoding = tokenizer->Encode(texts[i]);
      if (!encoding.ok()) {
        std::cerr << encoding.status() << "\n";
        return 3;
      }
      tokens += static_cast<int64_t>(encoding->ids.size());
      ids[i] = std::move(encoding->ids);
    }
    if (round < 0)
      first = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, Seconds(start, round));
  }
  double best_stream = 1e30;
  for (int round = -1; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (const std::vector<int64_t>& text_ids : ids) {
      attnserve::TextStream stream(*tokenizer, {});
      for (int64_t id : text_ids) stream.Push(id);
      stream.Finish();
    }
    best_stream = std::min(best_stream, Seconds(start, round));
  }
  std::cout << nlohmann::json{{"tokens", tokens},
                              {"seconds", best},
                              {"first_seconds", first},
                              {"stream_seconds", best_stream},
                              {"peak_growth_kib", PeakKib() - loaded_kib}}
                   .dump()
            << "\n";
  return 0;
}
