// A sequence classification head (ClassifierConfig): pooled vectors [B, dim] through an optional
// dense layer and its activation, then the output layer, to logits [B, num_labels]. BERT's pooler
// and classifier, RoBERTa's classifier.dense and out_proj, DistilBERT's pre_classifier and
// classifier, a decoder's score layer.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/importers/model_config.h"
#include "engine/importers/weight_reader.h"
#include "engine/matmul.h"

namespace attnserve {

// One sequence's scores from its logits, by `activation`: as they are, each through a sigmoid,
// or a softmax over all of them.
std::vector<float> ClassScores(const float* logits, int64_t count,
                               ClassifierConfig::ScoreActivation activation);

class ClassificationHead {
 public:
  // classifier.dense.{weight,bias} (when config.classifier.dense) and classifier.out.
  static absl::StatusOr<ClassificationHead> Load(WeightReader& weights, const ModelConfig& config);

  absl::StatusOr<Tensor> Logits(const Tensor& pooled) const;

  const ClassifierConfig& config() const { return config_; }

 private:
  ClassifierConfig config_;
  LinearWeights dense_, out_;
};

}  // namespace attnserve
