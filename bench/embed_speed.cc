// Times embedding sentences through the engine, tokenization included, for
// bench/embedding_bench.py:
//   embed_speed MODEL_DIR SENTENCES_JSONL BATCH ROUNDS
// embeds every sentence (one JSON string per line) in batches of BATCH, ROUNDS times after a
// warm-up round, and prints a JSON object: the best round's seconds and the embeddings of the
// first round (to check them against the peers').
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/architectures/model.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: embed_speed MODEL_DIR SENTENCES_JSONL BATCH ROUNDS\n";
    return 1;
  }
  auto model = attnserve::LoadModel(argv[1]);
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 2;
  }
  std::vector<std::string> sentences;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    sentences.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  const size_t batch = std::stoul(argv[3]);
  const int rounds = std::stoi(argv[4]);
  const attnserve::Model& m = **model;
  nlohmann::json embeddings = nlohmann::json::array();
  double best = 1e30;
  for (int round = -1; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t first = 0; first < sentences.size(); first += batch) {
      attnserve::ModelInputs inputs;
      for (size_t i = first; i < std::min(first + batch, sentences.size()); ++i) {
        auto ids = m.tokenizer->EncodeIds(sentences[i]);
        if (!ids.ok()) {
          std::cerr << ids.status() << "\n";
          return 3;
        }
        inputs.tokens.push_back(*std::move(ids));
      }
      auto output = m.servable->Embed(inputs, std::nullopt, {});
      if (!output.ok()) {
        std::cerr << output.status() << "\n";
        return 3;
      }
      if (round == -1) {
        for (int64_t b = 0; b < output->values.dim(0); ++b) {
          const float* row = output->values.Select(b).data();
          embeddings.push_back(std::vector<float>(row, row + output->values.dim(-1)));
        }
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round >= 0) best = std::min(best, seconds);
  }
  std::cout << nlohmann::json{{"seconds", best},
                              {"threads", omp_get_max_threads()},
                              {"embeddings", embeddings}}
                   .dump()
            << "\n";
  return 0;
}
