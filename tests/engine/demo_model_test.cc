// The bundled demo model loads, predicts English better than a unigram byte model, and decodes
// the same way incrementally as in one pass.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/architectures/model.h"

namespace attnserve {
namespace {

constexpr char kDemo[] = ATTNSERVE_SOURCE_DIR "/models/demo";
// docs/demo-model.md: the unigram byte model's held-out loss is about 3.3 nats per byte.
constexpr double kUnigramNats = 3.3;

double MeanNextByteLoss(const CausalLM& lm, const std::vector<int64_t>& ids) {
  auto logits = lm.Logits({ids});
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return INFINITY;
  const Tensor rows = logits->Select(0);
  double total = 0.0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* row = rows.row(t);
    double max = row[0], sum = 0.0;
    for (int64_t v = 0; v < rows.dim(1); ++v) max = std::max<double>(max, row[v]);
    for (int64_t v = 0; v < rows.dim(1); ++v) sum += std::exp(row[v] - max);
    total += max + std::log(sum) - row[ids[t + 1]];
  }
  return total / static_cast<double>(ids.size() - 1);
}

TEST(DemoModelTest, LoadsAndBeatsAUnigramModelOnEnglish) {
  auto model = LoadModel(kDemo);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_NE((*model)->As<CausalLM>(), nullptr);
  ASSERT_NE((*model)->tokenizer, nullptr);
  const std::vector<int64_t> ids = *(*model)->tokenizer->EncodeIds(
      "A man who has never gone to school may steal from a freight car, but if he has a "
      "university education, he may steal the whole railroad.");
  const double loss = MeanNextByteLoss(*(*model)->As<CausalLM>(), ids);
  EXPECT_LT(loss, kUnigramNats - 0.5) << "nats per byte";
}

TEST(DemoModelTest, GreedyDecodingGivesPrintableText) {
  auto model = LoadModel(kDemo);
  ASSERT_TRUE(model.ok()) << model.status();
  const CausalLM& lm = *(*model)->As<CausalLM>();
  auto state = lm.NewState(256);
  DecoderState* pointer = state.get();
  TokenSequences feed = {*(*model)->tokenizer->EncodeIds("The meaning of life is")};
  std::vector<int64_t> generated;
  for (int step = 0; step < 40; ++step) {
    auto logits = lm.Advance({&pointer, 1}, feed);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const float* row = logits->row(0);
    const int64_t next = std::max_element(row, row + logits->dim(1)) - row;
    generated.push_back(next);
    feed = {{next}};
  }
  auto text = (*model)->tokenizer->Decode(generated);
  ASSERT_TRUE(text.ok()) << text.status();
  int printable = 0;
  for (unsigned char c : *text) printable += (c >= 32 && c < 127) || c == '\n';
  EXPECT_GE(printable, static_cast<int>(text->size() * 9 / 10)) << *text;
}

}  // namespace
}  // namespace attnserve
