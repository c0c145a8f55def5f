#include "engine/architectures/perceiver_io.h"

#include "common/status_macros.h"
#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<PerceiverIO>> PerceiverIO::Load(const ModelConfig& config,
                                                               WeightReader& weights) {
  auto model = std::unique_ptr<PerceiverIO>(new PerceiverIO());
  model->config_ = config;
  const int64_t dim = config.model_dim;
  ASSIGN_OR_RETURN(model->embedding_, InputEmbedding::Load(weights, config));
  for (auto [name, tensor, rows] :
       {std::tuple{"latents", &model->latents_, config.num_latents},
        std::tuple{"output_queries", &model->output_queries_, config.num_outputs}}) {
    ASSIGN_OR_RETURN(*tensor, weights.Take(name, {rows, dim}));
  }
  BlockConfig cross = BlockConfigFor(config);
  cross.self_attention = false;
  cross.cross_attention = true;
  for (auto [name, slot] : {std::pair{"encode", &model->encode_}, {"decode", &model->decode_}}) {
    ASSIGN_OR_RETURN(*slot, TransformerBlock::Load(weights, name, cross));
  }
  ASSIGN_OR_RETURN(model->stack_, LayerStack::Load(weights, "", config, BlockConfigFor(config),
                                                   config.num_layers));
  ASSIGN_OR_RETURN(model->output_proj_, weights.TakeLinear("output_proj", config.output_dim,
                                                           config.model_dim, config.bias));
  return model;
}

absl::StatusOr<Tensor> PerceiverIO::Forward(const ModelInputs& inputs) const {
  ASSIGN_OR_RETURN(PaddedBatch x, EmbedInputs(embedding_, config_, inputs));
  ASSIGN_OR_RETURN(KeyValues input_memory, encode_->ProjectMemory(x));
  const PaddedBatch latents = RepeatForBatch(latents_, x.batch());
  ASSIGN_OR_RETURN(Tensor encoded, encode_->Forward(latents, &input_memory));
  ASSIGN_OR_RETURN(PaddedBatch latent_states,
                   stack_->Forward({std::move(encoded), latents.lengths}));
  ASSIGN_OR_RETURN(KeyValues latent_memory, decode_->ProjectMemory(latent_states));
  ASSIGN_OR_RETURN(Tensor decoded,
                   decode_->Forward(RepeatForBatch(output_queries_, x.batch()), &latent_memory));
  return LinearRows(decoded, output_proj_);
}

}  // namespace attnserve
