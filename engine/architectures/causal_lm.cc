#include "engine/architectures/causal_lm.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<CausalLM>> CausalLM::Load(const ModelConfig& config,
                                                         WeightReader& weights) {
  auto model = std::unique_ptr<CausalLM>(new CausalLM());
  model->config_ = config;
  ASSIGN_OR_RETURN(model->embedding_, InputEmbedding::Load(weights, config));
  BlockConfig block = BlockConfigFor(config);
  block.causal = true;
  ASSIGN_OR_RETURN(model->stack_, LayerStack::Load(weights, "", config, block, config.num_layers));
  // A sequence classifier (Llama's, Qwen2's *ForSequenceClassification) has a score layer
  // instead of the LM head, and answers Classify only.
  if (config.classifier.num_labels > 0) {
    ASSIGN_OR_RETURN(model->head_, ClassificationHead::Load(weights, config));
    return model;
  }
  ASSIGN_OR_RETURN(model->lm_head_, LoadLmHead(weights, config, model->embedding_));
  return model;
}

absl::StatusOr<Tensor> CausalLM::Classify(const ModelInputs& inputs) const {
  if (!head_) return absl::FailedPreconditionError("the model has no classification head");
  ASSIGN_OR_RETURN(PaddedBatch h, Forward(inputs.tokens));
  return head_->Logits(LastRows(h));
}

std::vector<std::vector<LayerCache*>> CachesByLayer(std::span<DecoderState* const> states,
                                                    size_t layers) {
  std::vector<std::vector<LayerCache*>> caches(layers);
  for (size_t i = 0; i < layers; ++i) {
    for (DecoderState* state : states) caches[i].push_back(&state->layers[i]);
  }
  return caches;
}

int64_t DecoderState::ReusePrefix(std::span<const int64_t> prompt) {
  if (position != 0) return 0;
  const int64_t reused = table->ReusePrefix(prompt);
  FollowTable();
  return reused;
}

void DecoderState::Reset() {
  table->Clear();
  FollowTable();
}

void DecoderState::FollowTable() {
  if (table->pool() == nullptr) return;  // linear attention: the state is not in blocks
  position = table->tokens();
  for (LayerCache& layer : layers) {
    if (!layer.is_linear()) layer.SetLength(position);
  }
}

std::optional<KvBlockShape> StackCacheShape(const LayerStack& stack, int64_t block_tokens) {
  if (stack.layers().empty()) return std::nullopt;
  auto shape = stack.layers()[0].self_attention()->CacheShape();
  if (!shape) return std::nullopt;
  shape->layers = static_cast<int64_t>(stack.layers().size());
  shape->block_tokens = block_tokens;
  return shape;
}

std::unique_ptr<DecoderState> NewDecoderState(const LayerStack& stack, KvBlockPool* pool,
                                              bool share_prefixes, int64_t capacity) {
  std::unique_ptr<KvBlockPool> own_pool;
  if (pool == nullptr) {
    if (auto shape = StackCacheShape(stack, KvBlockShape().block_tokens)) {
      own_pool = *KvBlockPool::Create(*shape, std::max<int64_t>(1, shape->BlocksFor(capacity)));
      pool = own_pool.get();
    }
  }
  const bool reserve = own_pool != nullptr;
  auto table = std::make_unique<BlockTable>(pool, share_prefixes);
  BlockTable* table_view = table.get();
  auto state = std::make_unique<DecoderState>(std::move(own_pool), std::move(table), table_view);
  for (size_t i = 0; i < stack.layers().size(); ++i) {
    state->layers.push_back(stack.layers()[i].NewCache(table_view, static_cast<int64_t>(i)));
  }
  if (reserve) table_view->Reserve(capacity);
  return state;
}

std::unique_ptr<DecoderState> NewDecoderState(const LayerStack& stack, BlockTable* table) {
  auto state = std::make_unique<DecoderState>(nullptr, nullptr, table);
  for (size_t i = 0; i < stack.layers().size(); ++i) {
    state->layers.push_back(stack.layers()[i].NewCache(table, static_cast<int64_t>(i)));
  }
  state->FollowTable();
  return state;
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
    const int64_t capacity = states[b]->table->capacity();
    if (states[b]->position > capacity - static_cast<int64_t>(tokens[b].size())) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", b, " would reach ",
                                                states[b]->position + tokens[b].size(),
                                                " tokens; its context holds ", capacity));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PaddedBatch> CausalLM::Forward(const TokenSequences& sequences) const {
  ASSIGN_OR_RETURN(PaddedBatch x, embedding_.EmbedTokens(sequences));
  return stack_->Forward(std::move(x));
}

absl::StatusOr<Tensor> CausalLM::Logits(const TokenSequences& sequences) const {
  ASSIGN_OR_RETURN(PaddedBatch h, Forward(sequences));
  ASSIGN_OR_RETURN(Tensor logits, LinearRows(h.values, lm_head_));
  ZeroPadding(logits, h.lengths);
  return logits;
}

absl::StatusOr<Tensor> CausalLM::LastLogits(const TokenSequences& sequences) const {
  ASSIGN_OR_RETURN(PaddedBatch h, Forward(sequences));
  return LinearRows(LastRows(h), lm_head_);
}

std::optional<KvBlockShape> CausalLM::CacheShape(int64_t block_tokens) const {
  return StackCacheShape(*stack_, block_tokens);
}

bool CausalLM::CachesDependOnTokensAlone() const {
  // Dynamic NTK scaling and LongRoPE rotate keys by the sequence's length when they were
  // computed, so a published block would hold keys that depend on how its sequence was fed.
  return !config_.rotary.depends_on_context();
}

std::unique_ptr<DecoderState> CausalLM::NewState(KvBlockPool* pool) const {
  return NewDecoderState(*stack_, pool, CachesDependOnTokensAlone(), 0);
}

std::unique_ptr<DecoderState> CausalLM::NewState(int64_t capacity) const {
  // At most max_positions, the model's maximum context.
  return NewDecoderState(*stack_, nullptr, CachesDependOnTokensAlone(),
                         std::min(capacity, config_.max_positions));
}

absl::StatusOr<Tensor> CausalLM::NextTokenLogits(const TokenSequences& /*sources*/,
                                                 const TokenSequences& sequences) const {
  return LastLogits(sequences);
}

absl::StatusOr<Tensor> CausalLM::Logits(const TokenSequences& /*sources*/,
                                        const TokenSequences& sequences) const {
  return Logits(sequences);
}

absl::StatusOr<std::unique_ptr<GenerationState>> CausalLM::Start(
    const std::vector<int64_t>& /*source*/, BlockTable* table) const {
  return std::unique_ptr<GenerationState>(NewDecoderState(*stack_, table));
}

absl::StatusOr<Tensor> CausalLM::Advance(std::span<GenerationState* const> states,
                                         const TokenSequences& tokens) const {
  std::vector<DecoderState*> decoders;
  for (GenerationState* state : states) decoders.push_back(&state->decoder());
  return Advance(decoders, tokens);
}

absl::StatusOr<Tensor> CausalLM::Advance(std::span<DecoderState* const> states,
                                         const TokenSequences& tokens) const {
  for (DecoderState* state : states) state->FollowTable();
  RETURN_IF_ERROR(CheckRoomFor(states, tokens));
  std::vector<int64_t> starts;
  for (const DecoderState* state : states) starts.push_back(state->position);
  // Embedding validates ids and positions before any cache is touched.
  ASSIGN_OR_RETURN(PaddedBatch x, embedding_.EmbedTokens(tokens, starts));
  ASSIGN_OR_RETURN(PaddedBatch h, stack_->Forward(std::move(x), {},
                                                  CachesByLayer(states, stack_->layers().size())));
  for (size_t b = 0; b < states.size(); ++b) {
    states[b]->position += h.lengths[b];
    states[b]->table->Commit(tokens[b]);
  }
  return LinearRows(LastRows(h), lm_head_);
}

}  // namespace attnserve
