// What int8 weights cost in accuracy, for tests/engine/quantization_accuracy_test.py and
// docs/benchmarks.md: loads a model directory twice, with float32 and with int8 weights, reads
// {"texts": [...]} on stdin, tokenizes each text with the model's tokenizer and prints a JSON
// object comparing the two on every text, one at a time:
//   causal LMs: the mean next-token loss of each (nats per token), how often their most likely
//     next tokens agree, the largest logit difference and the largest logit;
//   encoders: the cosine of each text's two pooled embeddings.
// A text longer than the model's context is cut to it.
// --float_activations keeps the int8 model's activations float where the CPU has VNNI
// (WeightFormat::int8_activations).
// Usage: quantization_tool MODEL_DIR [--int8_group_size G] [--float_activations] < texts.json
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/architectures/model.h"

namespace {

using attnserve::Tensor;
using nlohmann::json;

int Fail(const absl::Status& status) {
  std::cerr << status.message() << "\n";
  return 3;
}

// -log softmax(row)[target].
double Loss(const float* row, int64_t width, int64_t target) {
  const double largest = *std::max_element(row, row + width);
  double sum = 0.0;
  for (int64_t v = 0; v < width; ++v) sum += std::exp(row[v] - largest);
  return largest + std::log(sum) - row[target];
}

struct LmTotals {
  double loss[2] = {0, 0};
  int64_t predictions = 0, agreements = 0;
  double max_diff = 0, max_logit = 0;
};

absl::Status CompareLm(const attnserve::CausalLM* const lms[2], const std::vector<int64_t>& ids,
                       LmTotals& totals) {
  Tensor logits[2];
  for (int i = 0; i < 2; ++i) {
    auto result = lms[i]->Logits({ids});
    if (!result.ok()) return result.status();
    logits[i] = result->Select(0);
  }
  const int64_t width = logits[0].dim(1);
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* rows[2] = {logits[0].row(t), logits[1].row(t)};
    for (int i = 0; i < 2; ++i) totals.loss[i] += Loss(rows[i], width, ids[t + 1]);
    int64_t top[2];
    for (int i = 0; i < 2; ++i) top[i] = std::max_element(rows[i], rows[i] + width) - rows[i];
    totals.agreements += top[0] == top[1];
    ++totals.predictions;
    for (int64_t v = 0; v < width; ++v) {
      totals.max_diff = std::max<double>(totals.max_diff, std::fabs(rows[0][v] - rows[1][v]));
      totals.max_logit = std::max<double>(totals.max_logit, std::fabs(rows[0][v]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> EmbeddingCosine(const attnserve::Model* const models[2],
                                       const std::vector<int64_t>& ids) {
  std::vector<float> vectors[2];
  for (int i = 0; i < 2; ++i) {
    auto output = models[i]->servable->Embed({{ids}, {}}, std::nullopt, {});
    if (!output.ok()) return output.status();
    const Tensor row = output->values.Select(0);
    vectors[i].assign(row.row(0), row.row(0) + row.dim(-1));
  }
  double dot = 0, norms[2] = {0, 0};
  for (size_t j = 0; j < vectors[0].size(); ++j) {
    dot += double(vectors[0][j]) * vectors[1][j];
    for (int i = 0; i < 2; ++i) norms[i] += double(vectors[i][j]) * vectors[i][j];
  }
  return dot / std::sqrt(norms[0] * norms[1]);
}

}  // namespace

int main(int argc, char** argv) {
  attnserve::LoadOptions int8;
  int8.weights.quantized = true;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--int8_group_size" && i + 1 < argc) {
      int8.weights.group_size = std::atoll(argv[++i]);
    } else if (flag == "--float_activations") {
      int8.weights.int8_activations = false;
    } else {
      argc = 0;
    }
  }
  if (argc < 2) {
    std::cerr << "usage: quantization_tool MODEL_DIR [--int8_group_size G] [--float_activations]"
                 " < texts.json\n";
    return 1;
  }
  std::unique_ptr<attnserve::Model> loaded[2];
  for (int i = 0; i < 2; ++i) {
    auto model = attnserve::LoadModel(argv[1], i == 0 ? attnserve::LoadOptions{} : int8);
    if (!model.ok()) {
      std::cerr << model.status().message() << "\n";
      return 2;
    }
    loaded[i] = *std::move(model);
  }
  const attnserve::Model* const models[2] = {loaded[0].get(), loaded[1].get()};
  std::stringstream text;
  text << std::cin.rdbuf();
  const auto texts = json::parse(text.str())["texts"].get<std::vector<std::string>>();
  json out;
  const attnserve::CausalLM* const lms[2] = {models[0]->As<attnserve::CausalLM>(),
                                             models[1]->As<attnserve::CausalLM>()};
  LmTotals totals;
  std::vector<double> cosines;
  for (const std::string& sample : texts) {
    auto ids = models[0]->tokenizer->EncodeIds(sample);
    if (!ids.ok()) return Fail(ids.status());
    // Texts longer than the model's context are cut to it.
    ids->resize(std::min<size_t>(ids->size(), models[0]->config.max_positions));
    if (lms[0] != nullptr) {
      if (auto status = CompareLm(lms, *ids, totals); !status.ok()) return Fail(status);
    } else {
      auto cosine = EmbeddingCosine(models, *ids);
      if (!cosine.ok()) return Fail(cosine.status());
      cosines.push_back(*cosine);
    }
  }
  if (lms[0] != nullptr) {
    out = {{"predictions", totals.predictions},
           {"loss_float32", totals.loss[0] / totals.predictions},
           {"loss_int8", totals.loss[1] / totals.predictions},
           {"top1_agreement", double(totals.agreements) / totals.predictions},
           {"max_logit_diff", totals.max_diff},
           {"max_abs_logit", totals.max_logit}};
  } else {
    out = {{"cosines", cosines}, {"min_cosine", *std::min_element(cosines.begin(), cosines.end())}};
  }
  std::cout << out.dump() << "\n";
  return 0;
}
