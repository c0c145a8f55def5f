// Perceiver IO (Jaegle et al. 2022): a learned latent array (latents) reads the inputs through a
// cross-attention block (encode.*), latent self-attention blocks (layers.N, then final_norm
// when pre-norm) process it, and learned output queries (output_queries) read the latents through
// another cross-attention block (decode.*); output_proj maps each to output_dim.
#pragma once

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/architectures/encoder.h"
#include "engine/architectures/servable_model.h"

namespace attnserve {

class PerceiverIO final : public ServableModel {
 public:
  static absl::StatusOr<std::unique_ptr<PerceiverIO>> Load(const ModelConfig& config,
                                                           WeightReader& weights);

  // [B, num_outputs, output_dim].
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
  Tensor latents_, output_queries_;
  std::optional<TransformerBlock> encode_, decode_;
  std::optional<LayerStack> stack_;
  LinearWeights output_proj_;
};

}  // namespace attnserve
