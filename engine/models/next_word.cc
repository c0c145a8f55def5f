#include "engine/models/next_word.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<NextWordModel>> NextWordModel::Load(const ModelConfig& config,
                                                                   WeightReader& weights) {
  auto model = std::unique_ptr<NextWordModel>(new NextWordModel());
  model->config_ = config;
  auto embedding = InputEmbedding::Load(weights, config);
  if (!embedding.ok()) return embedding.status();
  model->embedding_ = *std::move(embedding);
  const BlockConfig block = BlockConfigFor(config);
  auto stack = LayerStack::Load(weights, "", config, block, config.num_layers);
  if (!stack.ok()) return stack.status();
  model->stack_.emplace(*std::move(stack));
  if (config.pooling == Pooling::kCls) {
    auto cls = weights.Take("cls_token", {config.model_dim});
    if (!cls.ok()) return cls.status();
    model->cls_token_ = *std::move(cls);
  } else {
    BlockConfig pool_block = block;
    pool_block.alibi = false;
    auto pma = PoolingByAttention::Load(weights, "pool", pool_block, 1);
    if (!pma.ok()) return pma.status();
    model->pma_.emplace(*std::move(pma));
  }
  auto head = weights.TakeLinear("lm_head", config.vocab_size, config.model_dim, config.bias);
  if (!head.ok()) return head.status();
  model->lm_head_ = *std::move(head);
  return model;
}

absl::StatusOr<Tensor> NextWordModel::Logits(const TokenSequences& contexts) const {
  for (size_t b = 0; b < contexts.size(); ++b) {
    if (contexts[b].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("context ", b, " is empty"));
    }
  }
  auto x = embedding_.EmbedTokens(contexts);
  if (!x.ok()) return x.status();
  Tensor pooled;
  if (pma_) {
    auto states = stack_->Forward(*std::move(x));
    if (!states.ok()) return states.status();
    auto seeds = pma_->Forward(*states);
    if (!seeds.ok()) return seeds.status();
    pooled = LastRows({*seeds, std::vector<int64_t>(states->batch(), 1)});
  } else {
    // The CLS token goes right after each context's last token, without a position vector.
    const int64_t batch = x->batch(), dim = config_.model_dim;
    PaddedBatch with_cls{Tensor::Zeros({batch, x->time() + 1, dim}), x->lengths};
    for (int64_t b = 0; b < batch; ++b) {
      std::memcpy(with_cls.values.Select(b).data(), x->values.Select(b).data(),
                  x->lengths[b] * dim * sizeof(float));
      std::memcpy(with_cls.values.Select(b).row(x->lengths[b]), cls_token_.data(),
                  dim * sizeof(float));
      ++with_cls.lengths[b];
    }
    auto states = stack_->Forward(std::move(with_cls));
    if (!states.ok()) return states.status();
    pooled = LastRows(*states);
  }
  return LinearRows(pooled, lm_head_);
}

}  // namespace attnserve
