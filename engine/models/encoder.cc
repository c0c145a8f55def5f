#include "engine/models/encoder.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/kernels/vector_ops.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<Encoder>> Encoder::Load(const ModelConfig& config,
                                                       WeightReader& weights) {
  auto model = std::unique_ptr<Encoder>(new Encoder());
  model->config_ = config;
  auto embedding = InputEmbedding::Load(weights, config);
  if (!embedding.ok()) return embedding.status();
  model->embedding_ = *std::move(embedding);
  const BlockConfig block = BlockConfigFor(config);
  for (int64_t i = 0; i < config.num_layers; ++i) {
    auto layer = TransformerBlock::Load(weights, absl::StrCat("layers.", i), block);
    if (!layer.ok()) return layer.status();
    model->layers_.push_back(*std::move(layer));
  }
  if (config.pre_norm) {
    auto norm = Norm::Load(weights, "final_norm", config.norm, config.model_dim, config.norm_eps);
    if (!norm.ok()) return norm.status();
    model->final_norm_ = *std::move(norm);
  }
  if (config.pooling == Pooling::kPma) {
    auto pma = PoolingByAttention::Load(weights, "pool", block, 1);
    if (!pma.ok()) return pma.status();
    model->pma_.emplace(*std::move(pma));
  }
  return model;
}

absl::StatusOr<PaddedBatch> Encoder::States(const ModelInputs& inputs) const {
  auto x = config_.token_inputs() ? embedding_.EmbedTokens(inputs.tokens)
                                  : embedding_.EmbedFeatures(inputs.features);
  if (!x.ok()) return x.status();
  for (const TransformerBlock& layer : layers_) {
    auto h = layer.Forward(*x);
    if (!h.ok()) return h.status();
    x->values = *std::move(h);
  }
  if (final_norm_) {
    if (auto status = final_norm_->Apply(x->values, x->values); !status.ok()) return status;
    ZeroPadding(x->values, x->lengths);
  }
  return x;
}

absl::StatusOr<Tensor> Encoder::Embed(const ModelInputs& inputs,
                                      std::optional<Pooling> pooling) const {
  const Pooling mode = pooling.value_or(config_.pooling);
  if (mode == Pooling::kNone) {
    return absl::InvalidArgumentError("pooling none gives per-token states, not one vector");
  }
  if (mode == Pooling::kPma && !pma_) {
    return absl::InvalidArgumentError("PMA pooling needs a model trained with it");
  }
  auto states = States(inputs);
  if (!states.ok()) return states.status();
  const int64_t batch = states->batch(), dim = states->width();
  for (int64_t b = 0; b < batch; ++b) {
    if (states->lengths[b] == 0) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, " is empty"));
    }
  }
  Tensor pooled = Tensor::Zeros({batch, dim});
  if (mode == Pooling::kPma) {
    auto seeds = pma_->Forward(*states);
    if (!seeds.ok()) return seeds.status();
    for (int64_t b = 0; b < batch; ++b) {
      std::memcpy(pooled.row(b), seeds->Select(b).row(0), dim * sizeof(float));
    }
  } else {
    for (int64_t b = 0; b < batch; ++b) {
      const Tensor rows = states->values.Select(b);
      const int64_t length = states->lengths[b];
      if (mode == Pooling::kMean) {
        for (int64_t t = 0; t < length; ++t) vec::Axpy(1.0f, rows.row(t), pooled.row(b), dim);
        vec::Scale(pooled.row(b), dim, 1.0f / static_cast<float>(length));
      } else {
        const int64_t t = mode == Pooling::kFirst ? 0 : length - 1;
        std::memcpy(pooled.row(b), rows.row(t), dim * sizeof(float));
      }
    }
  }
  if (config_.normalize) {
    for (int64_t b = 0; b < batch; ++b) {
      // As torch.nn.functional.normalize: x / max(||x||, 1e-12).
      const float norm = std::sqrt(vec::Dot(pooled.row(b), pooled.row(b), dim));
      vec::Scale(pooled.row(b), dim, 1.0f / std::max(norm, 1e-12f));
    }
  }
  return pooled;
}

}  // namespace attnserve
