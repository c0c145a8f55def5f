// Set Transformer (Lee et al. 2019): an encoder of ISAB blocks (num_inducing > 0) or SAB blocks
// (num_inducing = 0; SAB is an encoder block) under layers.N, final_norm when pre-norm, PMA with
// num_seeds seeds (pool.*), and output_proj: a permutation-invariant set embedding.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/architectures/encoder.h"
#include "engine/architectures/servable_model.h"
#include "engine/blocks/induced_set.h"

namespace attnserve {

class SetTransformer final : public ServableModel {
 public:
  static absl::StatusOr<std::unique_ptr<SetTransformer>> Load(const ModelConfig& config,
                                                              WeightReader& weights);

  // [B, num_seeds, output_dim].
  absl::StatusOr<Tensor> Forward(const ModelInputs& inputs) const;

  const ModelConfig& config() const { return config_; }

  // ServableModel: Embed, a set of output vectors per input.
  bool Answers(ModelMethod method) const override { return method == ModelMethod::kEmbed; }
  int64_t num_layers() const override { return config_.num_layers; }
  absl::StatusOr<EmbedOutput> Embed(const ModelInputs& inputs, std::optional<Pooling> /*pooling*/,
                                    const std::vector<int64_t>& /*layers*/) const override {
    return VectorSets(Forward(inputs));
  }

 private:
  ModelConfig config_;
  InputEmbedding embedding_;
  std::vector<InducedSetAttention> induced_;  // ISAB layers, or empty
  std::optional<LayerStack> stack_;           // SAB layers (none when ISAB) and final_norm
  std::optional<PoolingByAttention> pma_;
  LinearWeights output_proj_;
};

}  // namespace attnserve
