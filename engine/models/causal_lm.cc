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
  auto stack = LayerStack::Load(weights, "", config, block, config.num_layers);
  if (!stack.ok()) return stack.status();
  model->stack_.emplace(*std::move(stack));
  auto head = LoadLmHead(weights, config, model->embedding_);
  if (!head.ok()) return head.status();
  model->lm_head_ = *std::move(head);
  return model;
}

std::vector<std::vector<LayerCache*>> CachesByLayer(std::span<DecoderState* const> states,
                                                    size_t layers) {
  std::vector<std::vector<LayerCache*>> caches(layers);
  for (size_t i = 0; i < layers; ++i) {
    for (DecoderState* state : states) caches[i].push_back(&state->layers[i]);
  }
  return caches;
}

absl::Status CheckRoomFor(std::span<DecoderState* const> states, const TokenSequences& tokens) {
  if (states.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(states.size(), " states for ", tokens.size(), " token sequences"));
  }
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
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CausalLM::Logits(const TokenSequences& sequences) const {
  auto x = embedding_.EmbedTokens(sequences);
  if (!x.ok()) return x.status();
  auto h = stack_->Forward(*std::move(x));
  if (!h.ok()) return h.status();
  auto logits = LinearRows(h->values, lm_head_, Tensor());
  if (!logits.ok()) return logits.status();
  ZeroPadding(*logits, h->lengths);
  return logits;
}

std::unique_ptr<DecoderState> CausalLM::NewState(int64_t capacity) const {
  capacity = std::min(capacity, config_.max_positions);  // the model's maximum context
  auto state = std::make_unique<DecoderState>();
  for (const TransformerBlock& layer : stack_->layers()) {
    state->layers.push_back(layer.NewCache(capacity));
  }
  return state;
}

absl::StatusOr<Tensor> CausalLM::Advance(std::span<DecoderState* const> states,
                                         const TokenSequences& tokens) const {
  if (auto status = CheckRoomFor(states, tokens); !status.ok()) return status;
  std::vector<int64_t> starts;
  for (const DecoderState* state : states) starts.push_back(state->position);
  // Embedding validates ids and positions before any cache is touched.
  auto x = embedding_.EmbedTokens(tokens, starts);
  if (!x.ok()) return x.status();
  auto h = stack_->Forward(*std::move(x), {}, CachesByLayer(states, stack_->layers().size()));
  if (!h.ok()) return h.status();
  for (size_t b = 0; b < states.size(); ++b) states[b]->position += h->lengths[b];
  return LinearRows(LastRows(*h), lm_head_, Tensor());
}

}  // namespace attnserve
