#include "engine/models/set_transformer.h"

#include "absl/strings/str_cat.h"
#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<SetTransformer>> SetTransformer::Load(const ModelConfig& config,
                                                                     WeightReader& weights) {
  auto model = std::unique_ptr<SetTransformer>(new SetTransformer());
  model->config_ = config;
  auto embedding = InputEmbedding::Load(weights, config);
  if (!embedding.ok()) return embedding.status();
  model->embedding_ = *std::move(embedding);
  const BlockConfig block = BlockConfigFor(config);
  const bool induced = config.num_inducing > 0;
  if (induced) {
    for (int64_t i = 0; i < config.num_layers; ++i) {
      auto isab = InducedSetAttention::Load(weights, absl::StrCat("layers.", i), block,
                                            config.num_inducing);
      if (!isab.ok()) return isab.status();
      model->induced_.push_back(*std::move(isab));
    }
  }
  // With ISAB layers the stack holds no blocks, only the final norm.
  auto stack = LayerStack::Load(weights, "", config, block, induced ? 0 : config.num_layers);
  if (!stack.ok()) return stack.status();
  model->stack_.emplace(*std::move(stack));
  auto pma = PoolingByAttention::Load(weights, "pool", block, config.num_seeds);
  if (!pma.ok()) return pma.status();
  model->pma_.emplace(*std::move(pma));
  auto output_proj =
      weights.TakeLinear("output_proj", config.output_dim, config.model_dim, config.bias);
  if (!output_proj.ok()) return output_proj.status();
  model->output_proj_ = *std::move(output_proj);
  return model;
}

absl::StatusOr<Tensor> SetTransformer::Forward(const ModelInputs& inputs) const {
  auto x = EmbedInputs(embedding_, config_, inputs);
  if (!x.ok()) return x.status();
  for (size_t b = 0; b < x->lengths.size(); ++b) {
    if (x->lengths[b] == 0) return absl::InvalidArgumentError(absl::StrCat("set ", b, " is empty"));
  }
  for (const InducedSetAttention& isab : induced_) {
    auto h = isab.Forward(*x);
    if (!h.ok()) return h.status();
    x->values = *std::move(h);
  }
  auto states = stack_->Forward(*std::move(x));
  if (!states.ok()) return states.status();
  auto pooled = pma_->Forward(*states);
  if (!pooled.ok()) return pooled.status();
  return LinearRows(*pooled, output_proj_);
}

}  // namespace attnserve
