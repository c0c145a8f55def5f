#include "engine/models/perceiver_io.h"

#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<PerceiverIO>> PerceiverIO::Load(const ModelConfig& config,
                                                               WeightReader& weights) {
  auto model = std::unique_ptr<PerceiverIO>(new PerceiverIO());
  model->config_ = config;
  const int64_t dim = config.model_dim;
  auto embedding = InputEmbedding::Load(weights, config);
  if (!embedding.ok()) return embedding.status();
  model->embedding_ = *std::move(embedding);
  for (auto [name, tensor, rows] :
       {std::tuple{"latents", &model->latents_, config.num_latents},
        std::tuple{"output_queries", &model->output_queries_, config.num_outputs}}) {
    auto loaded = weights.Take(name, {rows, dim});
    if (!loaded.ok()) return loaded.status();
    *tensor = *std::move(loaded);
  }
  BlockConfig cross = BlockConfigFor(config);
  cross.self_attention = false;
  cross.cross_attention = true;
  for (auto [name, slot] : {std::pair{"encode", &model->encode_}, {"decode", &model->decode_}}) {
    auto block = TransformerBlock::Load(weights, name, cross);
    if (!block.ok()) return block.status();
    slot->emplace(*std::move(block));
  }
  auto stack = LayerStack::Load(weights, "", config, BlockConfigFor(config), config.num_layers);
  if (!stack.ok()) return stack.status();
  model->stack_.emplace(*std::move(stack));
  auto output_proj =
      weights.TakeLinear("output_proj", config.output_dim, config.model_dim, config.bias);
  if (!output_proj.ok()) return output_proj.status();
  model->output_proj_ = *std::move(output_proj);
  return model;
}

absl::StatusOr<Tensor> PerceiverIO::Forward(const ModelInputs& inputs) const {
  auto x = EmbedInputs(embedding_, config_, inputs);
  if (!x.ok()) return x.status();
  auto input_memory = encode_->ProjectMemory(*x);
  if (!input_memory.ok()) return input_memory.status();
  const PaddedBatch latents = RepeatForBatch(latents_, x->batch());
  auto encoded = encode_->Forward(latents, &*input_memory);
  if (!encoded.ok()) return encoded.status();
  auto latent_states = stack_->Forward({*std::move(encoded), latents.lengths});
  if (!latent_states.ok()) return latent_states.status();
  auto latent_memory = decode_->ProjectMemory(*latent_states);
  if (!latent_memory.ok()) return latent_memory.status();
  auto decoded = decode_->Forward(RepeatForBatch(output_queries_, x->batch()), &*latent_memory);
  if (!decoded.ok()) return decoded.status();
  return LinearRows(*decoded, output_proj_);
}

}  // namespace attnserve
