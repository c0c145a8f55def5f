// Times embedding texts, or scoring pairs with a classifier, through the engine, tokenization
// included, for bench/embedding_bench.py and bench/retrieval_bench.py:
//   embed_speed MODEL_DIR TEXTS_JSONL BATCH ROUNDS [float32|bf16|int8]
// Each line of TEXTS_JSONL is a JSON string (Embed) or a [first, second] pair (Classify, the
// pair encoded as the tokenizer's template joins it). Runs every line in batches of BATCH, ROUNDS
// times after a warm-up round, and prints a JSON object: the best round's seconds and the first
// round's embeddings or logits (to check them against the peers'). The weight format is
// --weights' (float32 by default).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/architectures/model.h"

namespace {

// The inputs of one batch: the texts' tokens, or the pairs' tokens and token types.
absl::StatusOr<attnserve::ModelInputs> Tokenize(const attnserve::Tokenizer& tokenizer,
                                                const std::vector<nlohmann::json>& lines) {
  attnserve::ModelInputs inputs;
  for (const nlohmann::json& line : lines) {
    if (line.is_string()) {
      auto ids = tokenizer.EncodeIds(line.get<std::string>());
      if (!ids.ok()) return ids.status();
      inputs.tokens.push_back(*std::move(ids));
    } else {
      auto pair =
          tokenizer.EncodePair(line.at(0).get<std::string>(), line.at(1).get<std::string>());
      if (!pair.ok()) return pair.status();
      inputs.tokens.push_back(std::move(pair->ids));
      inputs.token_types.push_back(std::move(pair->type_ids));
    }
  }
  return inputs;
}

// The vectors of a batch's answer, one per input: its embedding or its logits.
void AppendRows(const attnserve::Tensor& values, nlohmann::json& out) {
  for (int64_t b = 0; b < values.dim(0); ++b) {
    const float* row = values.Select(b).data();
    out.push_back(std::vector<float>(row, row + values.dim(-1)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::cerr << "usage: embed_speed MODEL_DIR TEXTS_JSONL BATCH ROUNDS [float32|bf16|int8]\n";
    return 1;
  }
  attnserve::LoadOptions options;
  if (argc == 6) {
    const auto weights = attnserve::WeightFormatNamed(argv[5], options.weights);
    if (!weights) {
      std::cerr << "unknown weight format " << argv[5] << "\n";
      return 1;
    }
    options.weights = *weights;
  }
  auto model = attnserve::LoadModel(argv[1], options);
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 2;
  }
  std::vector<nlohmann::json> lines;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  const size_t batch = std::stoul(argv[3]);
  const int rounds = std::stoi(argv[4]);
  const attnserve::Model& m = **model;
  nlohmann::json vectors = nlohmann::json::array();
  double best = 1e30;
  for (int round = -1; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t first = 0; first < lines.size(); first += batch) {
      const std::vector<nlohmann::json> slice(
          lines.begin() + first, lines.begin() + std::min(first + batch, lines.size()));
      auto inputs = Tokenize(*m.tokenizer, slice);
      if (!inputs.ok()) {
        std::cerr << inputs.status() << "\n";
        return 3;
      }
      absl::StatusOr<attnserve::Tensor> values;
      if (slice.front().is_string()) {
        auto output = m.servable->Embed(*inputs, std::nullopt, {});
        values = output.ok() ? absl::StatusOr<attnserve::Tensor>(std::move(output->values))
                             : output.status();
      } else {
        values = m.servable->Classify(*inputs);
      }
      if (!values.ok()) {
        std::cerr << values.status() << "\n";
        return 3;
      }
      if (round == -1) AppendRows(*values, vectors);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round >= 0) best = std::min(best, seconds);
  }
  std::cout << nlohmann::json{{"seconds", best},
                              {"threads", omp_get_max_threads()},
                              {"embeddings", vectors}}
                   .dump()
            << "\n";
  return 0;
}
