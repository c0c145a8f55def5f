#include "engine/models/causal_lm.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<CausalLM>> CausalLM::Load(const ModelConfig& config,
                                                         WeightReader& weights) {
  auto model = std::unique_ptr<CausalLM>(new CausalLM());
  model->config_ = config;
  auto embedding = InputEmbedding::Load(weights, config);
  if (!embedding.ok()) return embedding.status();
  model->embedding_ = *std::move(embedding);
  BlockConfig block = BlockConfigFor(config);
  block.causal = true;
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
  if (config.tie_embeddings) {
    model->lm_head_ = model->embedding_.token_table();
  } else {
    auto head = weights.Take("lm_head.weight", {config.vocab_size, config.model_dim});
    if (!head.ok()) return head.status();
    model->lm_head_ = *std::move(head);
  }
  return model;
}

absl::StatusOr<Tensor> CausalLM::RunLayers(PaddedBatch x,
                                           std::span<DecoderState* const> states) const {
  std::vector<LayerCache*> caches(states.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (size_t b = 0; b < states.size(); ++b) caches[b] = &states[b]->layers[i];
    auto h = layers_[i].Forward(x, nullptr, caches);
    if (!h.ok()) return h.status();
    x.values = *std::move(h);
  }
  if (final_norm_) {
    if (auto status = final_norm_->Apply(x.values, x.values); !status.ok()) return status;
    ZeroPadding(x.values, x.lengths);
  }
  return x.values;
}

absl::StatusOr<Tensor> CausalLM::Logits(const TokenSequences& sequences) const {
  auto x = embedding_.EmbedTokens(sequences);
  if (!x.ok()) return x.status();
  const std::vector<int64_t> lengths = x->lengths;
  auto h = RunLayers(*std::move(x), {});
  if (!h.ok()) return h.status();
  auto logits = LinearRows(*h, lm_head_, Tensor());
  if (!logits.ok()) return logits.status();
  ZeroPadding(*logits, lengths);
  return logits;
}

std::unique_ptr<DecoderState> CausalLM::NewState(int64_t capacity) const {
  if (config_.positions == PositionKind::kSinusoidal ||
      config_.positions == PositionKind::kLearned) {
    capacity = std::min(capacity, config_.max_positions);
  }
  auto state = std::make_unique<DecoderState>();
  for (const TransformerBlock& layer : layers_) state->layers.push_back(layer.NewCache(capacity));
  return state;
}

absl::StatusOr<Tensor> CausalLM::Advance(std::span<DecoderState* const> states,
                                         const TokenSequences& tokens) const {
  if (states.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(states.size(), " states for ", tokens.size(), " token sequences"));
  }
  std::vector<int64_t> starts;
  for (size_t b = 0; b < states.size(); ++b) {
    if (tokens[b].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, " has no tokens to feed"));
    }
    const int64_t capacity =
        states[b]->layers.empty() ? INT64_MAX : states[b]->layers[0].capacity();
    if (states[b]->position + static_cast<int64_t>(tokens[b].size()) > capacity) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", b, " would reach ",
                                                states[b]->position + tokens[b].size(),
                                                " tokens; its context holds ", capacity));
    }
    starts.push_back(states[b]->position);
  }
  // Embedding validates ids and positions before any cache is touched.
  auto x = embedding_.EmbedTokens(tokens, starts);
  if (!x.ok()) return x.status();
  const std::vector<int64_t> lengths = x->lengths;
  auto h = RunLayers(*std::move(x), states);
  if (!h.ok()) return h.status();

  const int64_t batch = static_cast<int64_t>(states.size()), dim = config_.model_dim;
  Tensor last({batch, dim});
  for (int64_t b = 0; b < batch; ++b) {
    std::memcpy(last.row(b), h->Select(b).row(lengths[b] - 1), dim * sizeof(float));
    states[b]->position += lengths[b];
  }
  return LinearRows(last, lm_head_, Tensor());
}

}  // namespace attnserve
