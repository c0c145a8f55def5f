#include "engine/architectures/next_word.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<NextWordModel>> NextWordModel::Load(const ModelConfig& config,
                                                                   WeightReader& weights) {
  auto model = std::unique_ptr<NextWordModel>(new NextWordModel());
  model->config_ = config;
  ASSIGN_OR_RETURN(model->embedding_, InputEmbedding::Load(weights, config));
  const BlockConfig block = BlockConfigFor(config);
  ASSIGN_OR_RETURN(model->stack_, LayerStack::Load(weights, "", config, block, config.num_layers));
  if (config.pooling == Pooling::kCls) {
    ASSIGN_OR_RETURN(model->cls_token_, weights.Take("cls_token", {config.model_dim}));
  } else {
    BlockConfig pool_block = block;
    pool_block.alibi = false;
    ASSIGN_OR_RETURN(model->pma_, PoolingByAttention::Load(weights, "pool", pool_block, 1));
  }
  ASSIGN_OR_RETURN(model->lm_head_,
                   weights.TakeLinear("lm_head", config.vocab_size, config.model_dim, config.bias));
  return model;
}

absl::StatusOr<Tensor> NextWordModel::Logits(const TokenSequences& contexts) const {
  for (size_t b = 0; b < contexts.size(); ++b) {
    if (contexts[b].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("context ", b, " is empty"));
    }
  }
  ASSIGN_OR_RETURN(PaddedBatch x, embedding_.EmbedTokens(contexts));
  Tensor pooled;
  if (pma_) {
    ASSIGN_OR_RETURN(PaddedBatch states, stack_->Forward(std::move(x)));
    ASSIGN_OR_RETURN(Tensor seeds, pma_->Forward(states));
    pooled = LastRows({std::move(seeds), std::vector<int64_t>(states.batch(), 1)});
  } else {
    // The CLS token goes right after each context's last token, without a position vector.
    const int64_t batch = x.batch(), dim = config_.model_dim;
    PaddedBatch with_cls{Tensor::Zeros({batch, x.time() + 1, dim}), x.lengths};
    for (int64_t b = 0; b < batch; ++b) {
      std::memcpy(with_cls.values.Select(b).data(), x.values.Select(b).data(),
                  x.lengths[b] * dim * sizeof(float));
      std::memcpy(with_cls.values.Select(b).row(x.lengths[b]), cls_token_.data(),
                  dim * sizeof(float));
      ++with_cls.lengths[b];
    }
    ASSIGN_OR_RETURN(PaddedBatch states, stack_->Forward(std::move(with_cls)));
    pooled = LastRows(states);
  }
  return LinearRows(pooled, lm_head_);
}

}  // namespace attnserve
