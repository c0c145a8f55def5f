#include "engine/blocks/classification_head.h"

#include <algorithm>
#include <cmath>

#include "common/status_macros.h"
#include "engine/kernels/activations.h"

namespace attnserve {

std::vector<float> ClassScores(const float* logits, int64_t count,
                               ClassifierConfig::ScoreActivation activation) {
  std::vector<float> scores(logits, logits + count);
  switch (activation) {
    case ClassifierConfig::ScoreActivation::kNone:
      break;
    case ClassifierConfig::ScoreActivation::kSigmoid:
      for (float& s : scores) s = 1.0f / (1.0f + std::exp(-s));
      break;
    case ClassifierConfig::ScoreActivation::kSoftmax: {
      const float most = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (float& s : scores) sum += (s = std::exp(s - most));
      for (float& s : scores) s = static_cast<float>(s / sum);
      break;
    }
  }
  return scores;
}

absl::StatusOr<ClassificationHead> ClassificationHead::Load(WeightReader& weights,
                                                            const ModelConfig& config) {
  ClassificationHead head;
  head.config_ = config.classifier;
  const int64_t dim = config.model_dim;
  if (head.config_.dense) {
    ASSIGN_OR_RETURN(head.dense_, weights.TakeLinear("classifier.dense", dim, dim, true));
  }
  ASSIGN_OR_RETURN(head.out_, weights.TakeLinear("classifier.out", head.config_.num_labels, dim,
                                                 head.config_.out_bias));
  return head;
}

absl::StatusOr<Tensor> ClassificationHead::Logits(const Tensor& pooled) const {
  Tensor x = pooled;
  if (config_.dense) {
    ASSIGN_OR_RETURN(x, LinearRows(pooled, dense_));
    float* values = x.data();
    const int64_t n = x.size();
    switch (config_.dense_activation) {
      case ClassifierConfig::DenseActivation::kNone:
        break;
      case ClassifierConfig::DenseActivation::kTanh:
        std::transform(values, values + n, values, [](float v) { return std::tanh(v); });
        break;
      case ClassifierConfig::DenseActivation::kRelu:
        ReluInPlace(values, n);
        break;
      case ClassifierConfig::DenseActivation::kGelu:
        GeluErfInPlace(values, n);
        break;
    }
  }
  return LinearRows(x, out_);
}

}  // namespace attnserve
