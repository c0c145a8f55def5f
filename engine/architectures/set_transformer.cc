#include "engine/architectures/set_transformer.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<SetTransformer>> SetTransformer::Load(const ModelConfig& config,
                                                                     WeightReader& weights) {
  auto model = std::unique_ptr<SetTransformer>(new SetTransformer());
  model->config_ = config;
  ASSIGN_OR_RETURN(model->embedding_, InputEmbedding::Load(weights, config));
  const BlockConfig block = BlockConfigFor(config);
  const bool induced = config.num_inducing > 0;
  if (induced) {
    for (int64_t i = 0; i < config.num_layers; ++i) {
      ASSIGN_OR_RETURN(InducedSetAttention isab,
                       InducedSetAttention::Load(weights, absl::StrCat("layers.", i), block,
                                                 config.num_inducing));
      model->induced_.push_back(std::move(isab));
    }
  }
  // With ISAB layers the stack holds no blocks, only the final norm.
  ASSIGN_OR_RETURN(model->stack_,
                   LayerStack::Load(weights, "", config, block, induced ? 0 : config.num_layers));
  ASSIGN_OR_RETURN(model->pma_, PoolingByAttention::Load(weights, "pool", block, config.num_seeds));
  ASSIGN_OR_RETURN(model->output_proj_, weights.TakeLinear("output_proj", config.output_dim,
                                                           config.model_dim, config.bias));
  return model;
}

absl::StatusOr<Tensor> SetTransformer::Forward(const ModelInputs& inputs) const {
  ASSIGN_OR_RETURN(PaddedBatch x, EmbedInputs(embedding_, config_, inputs));
  for (size_t b = 0; b < x.lengths.size(); ++b) {
    if (x.lengths[b] == 0) return absl::InvalidArgumentError(absl::StrCat("set ", b, " is empty"));
  }
  for (const InducedSetAttention& isab : induced_) {
    ASSIGN_OR_RETURN(x.values, isab.Forward(x));
  }
  ASSIGN_OR_RETURN(PaddedBatch states, stack_->Forward(std::move(x)));
  ASSIGN_OR_RETURN(Tensor pooled, pma_->Forward(states));
  return LinearRows(pooled, output_proj_);
}

}  // namespace attnserve
