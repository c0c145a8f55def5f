// BERT-style next-word model: bidirectional encoder blocks over the context ("BERT", Devlin et
// al., 2019), pooled by a learned CLS token appended after the last token (cls_token) or by PMA
// (pool.*; "Set Transformer", Lee et al., 2019), then lm_head over the vocabulary.
#pragma once

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/architectures/input_embedding.h"
#include "engine/architectures/layer_stack.h"
#include "engine/architectures/servable_model.h"
#include "engine/blocks/pooling_by_attention.h"

namespace attnserve {

class NextWordModel final : public ServableModel {
 public:
  static absl::StatusOr<std::unique_ptr<NextWordModel>> Load(const ModelConfig& config,
                                                             WeightReader& weights);

  // Next-token logits after each context: [B, vocab].
  absl::StatusOr<Tensor> Logits(const TokenSequences& contexts) const;

  const ModelConfig& config() const { return config_; }

  // ServableModel: NextToken.
  bool Answers(ModelMethod method) const override { return method == ModelMethod::kNextToken; }
  int64_t num_layers() const override { return config_.num_layers; }
  absl::StatusOr<Tensor> NextTokenLogits(const TokenSequences& /*sources*/,
                                         const TokenSequences& contexts) const override {
    return Logits(contexts);
  }
  using ServableModel::Logits;

 private:
  ModelConfig config_;
  InputEmbedding embedding_;
  std::optional<LayerStack> stack_;
  Tensor cls_token_;  // [dim], CLS pooling
  std::optional<PoolingByAttention> pma_;
  LinearWeights lm_head_;
};

}  // namespace attnserve
