#include "engine/architectures/layer_stack.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace attnserve {

absl::StatusOr<LayerStack> LayerStack::Load(WeightReader& weights, const std::string& prefix,
                                            const ModelConfig& config, const BlockConfig& block,
                                            int64_t count) {
  LayerStack stack;
  for (int64_t i = 0; i < count; ++i) {
    BlockConfig layer_block = block;
    if (config.scale_scores_by_inverse_layer) {
      layer_block.attention_scale =
          1.0f / (std::sqrt(static_cast<float>(block.head_dim_qk)) * static_cast<float>(i + 1));
    }
    ASSIGN_OR_RETURN(
        TransformerBlock layer,
        TransformerBlock::Load(weights, absl::StrCat(prefix, "layers.", i), layer_block));
    stack.layers_.push_back(std::move(layer));
  }
  if (config.pre_norm) {
    ASSIGN_OR_RETURN(stack.final_norm_, Norm::Load(weights, prefix + "final_norm", config.norm,
                                                   config.model_dim, config.norm_eps));
  }
  return stack;
}

absl::StatusOr<PaddedBatch> LayerStack::Forward(PaddedBatch x, std::span<const KeyValues> memories,
                                                std::span<const std::vector<LayerCache*>> caches,
                                                std::map<int64_t, Tensor>* heads) const {
  for (size_t i = 0; i < layers_.size(); ++i) {
    const KeyValues* memory = memories.empty() ? nullptr : &memories[i];
    std::span<LayerCache* const> layer_caches;
    if (!caches.empty()) layer_caches = caches[i];
    Tensor* layer_heads = nullptr;
    if (heads != nullptr && heads->count(static_cast<int64_t>(i))) {
      layer_heads = &(*heads)[static_cast<int64_t>(i)];
    }
    ASSIGN_OR_RETURN(x.values, layers_[i].Forward(x, memory, layer_caches, layer_heads));
  }
  if (final_norm_) {
    RETURN_IF_ERROR(final_norm_->Apply(x.values, x.values));
    ZeroPadding(x.values, x.lengths);
  }
  return x;
}

}  // namespace attnserve
