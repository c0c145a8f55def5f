// Bidirectional encoder: input embedding (tokens or feature vectors), blocks (layers.N),
// final_norm for pre-norm stacks; per-token states and a pooled embedding (mean, first, last,
// or PMA with one seed under `pool.`), optionally L2-normalized.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/architectures/input_embedding.h"
#include "engine/architectures/layer_stack.h"
#include "engine/architectures/servable_model.h"
#include "engine/blocks/classification_head.h"
#include "engine/blocks/pooling_by_attention.h"

namespace attnserve {

// Embeds whichever kind of input the model takes.
absl::StatusOr<PaddedBatch> EmbedInputs(const InputEmbedding& embedding, const ModelConfig& config,
                                        const ModelInputs& inputs);

class Encoder final : public ServableModel {
 public:
  static absl::StatusOr<std::unique_ptr<Encoder>> Load(const ModelConfig& config,
                                                       WeightReader& weights);

  // Per-token states [B, T, dim], zero on padding. contributions, when given, maps layer
  // indices to receive that layer's per-head contributions [B, T, H, dim] (HeadContributions).
  absl::StatusOr<PaddedBatch> States(const ModelInputs& inputs,
                                     std::map<int64_t, Tensor>* contributions = nullptr) const;
  // Pooled embeddings [B, dim] with the configured pooling and normalization; `pooling`
  // overrides the config's (kPma needs a model trained with it).
  absl::StatusOr<Tensor> Embed(const ModelInputs& inputs,
                               std::optional<Pooling> pooling = std::nullopt) const;
  // The pooling step of Embed, on states from States.
  absl::StatusOr<Tensor> Pool(const PaddedBatch& states,
                              std::optional<Pooling> pooling = std::nullopt) const;
  bool has_classifier() const { return head_.has_value(); }

  const ModelConfig& config() const { return config_; }

  // ServableModel: Embed, pooled or per token, with per-head contributions; Classify with a
  // classification head (FAILED_PRECONDITION without one).
  bool Answers(ModelMethod method) const override {
    return method == ModelMethod::kEmbed || (method == ModelMethod::kClassify && head_);
  }
  bool gives_token_states() const override { return true; }
  int64_t num_layers() const override { return static_cast<int64_t>(stack_->layers().size()); }
  absl::StatusOr<EmbedOutput> Embed(const ModelInputs& inputs, std::optional<Pooling> pooling,
                                    const std::vector<int64_t>& contribution_layers) const override;
  absl::StatusOr<Tensor> Classify(const ModelInputs& inputs) const override;
  // Token sequences run in groups of similar length (without contributions, which come from
  // one pass).
  std::vector<std::vector<size_t>> EmbedPasses(const ModelInputs& inputs,
                                               bool contributions) const override;

 private:
  // One vector per sequence, by `mode`, not normalized.
  absl::StatusOr<Tensor> Gather(const PaddedBatch& states, Pooling mode) const;

  ModelConfig config_;
  InputEmbedding embedding_;
  std::optional<LayerStack> stack_;
  std::optional<PoolingByAttention> pma_;
  std::optional<ClassificationHead> head_;
};

}  // namespace attnserve
