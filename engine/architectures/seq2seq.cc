#include "engine/architectures/seq2seq.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/matmul.h"

namespace attnserve {
namespace {

// The sequences' keys and values (batches of 1) stacked into one padded batch.
KeyValues StackSources(std::span<Seq2SeqState* const> states, size_t layer) {
  const int64_t batch = static_cast<int64_t>(states.size());
  int64_t longest = 0;
  for (const Seq2SeqState* state : states) {
    longest = std::max(longest, state->source[layer].lengths[0]);
  }
  const KeyValues& first = states[0]->source[layer];
  KeyValues stacked{Tensor::Zeros({batch, longest, first.keys.dim(2)}),
                    Tensor::Zeros({batch, longest, first.values.dim(2)}),
                    {}};
  for (int64_t b = 0; b < batch; ++b) {
    const KeyValues& own = states[b]->source[layer];
    const int64_t length = own.lengths[0];
    for (int64_t t = 0; t < length; ++t) {
      std::memcpy(stacked.keys.Select(b).row(t), own.keys.Select(0).row(t),
                  own.keys.dim(2) * sizeof(float));
      std::memcpy(stacked.values.Select(b).row(t), own.values.Select(0).row(t),
                  own.values.dim(2) * sizeof(float));
    }
    stacked.lengths.push_back(length);
  }
  return stacked;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Seq2Seq>> Seq2Seq::Load(const ModelConfig& config,
                                                       WeightReader& weights) {
  auto model = std::unique_ptr<Seq2Seq>(new Seq2Seq());
  model->config_ = config;
  ASSIGN_OR_RETURN(model->embedding_, InputEmbedding::Load(weights, config));
  const BlockConfig block = BlockConfigFor(config);
  ASSIGN_OR_RETURN(model->encoder_,
                   LayerStack::Load(weights, "encoder.", config, block, config.num_layers));
  BlockConfig decoder_block = block;
  decoder_block.causal = true;
  decoder_block.cross_attention = true;
  ASSIGN_OR_RETURN(model->decoder_, LayerStack::Load(weights, "decoder.", config, decoder_block,
                                                     config.num_decoder_layers));
  ASSIGN_OR_RETURN(model->lm_head_, LoadLmHead(weights, config, model->embedding_));
  return model;
}

absl::StatusOr<PaddedBatch> Seq2Seq::Encode(const TokenSequences& sources) const {
  for (size_t b = 0; b < sources.size(); ++b) {
    if (sources[b].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("source ", b, " is empty"));
    }
  }
  ASSIGN_OR_RETURN(PaddedBatch x, embedding_.EmbedTokens(sources));
  return encoder_->Forward(std::move(x));
}

absl::StatusOr<std::vector<KeyValues>> Seq2Seq::ProjectSources(const PaddedBatch& memory) const {
  std::vector<KeyValues> projected;
  for (const TransformerBlock& layer : decoder_->layers()) {
    ASSIGN_OR_RETURN(KeyValues kv, layer.ProjectMemory(memory));
    projected.push_back(std::move(kv));
  }
  return projected;
}

absl::StatusOr<PaddedBatch> Seq2Seq::Decode(const TokenSequences& sources,
                                            const TokenSequences& targets) const {
  if (sources.size() != targets.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(sources.size(), " sources for ", targets.size(), " targets"));
  }
  ASSIGN_OR_RETURN(PaddedBatch memory, Encode(sources));
  ASSIGN_OR_RETURN(std::vector<KeyValues> projected, ProjectSources(memory));
  ASSIGN_OR_RETURN(PaddedBatch x, embedding_.EmbedTokens(targets));
  return decoder_->Forward(std::move(x), projected);
}

absl::StatusOr<Tensor> Seq2Seq::Logits(const TokenSequences& sources,
                                       const TokenSequences& targets) const {
  ASSIGN_OR_RETURN(PaddedBatch h, Decode(sources, targets));
  ASSIGN_OR_RETURN(Tensor logits, LinearRows(h.values, lm_head_));
  ZeroPadding(logits, h.lengths);
  return logits;
}

absl::StatusOr<Tensor> Seq2Seq::LastLogits(const TokenSequences& sources,
                                           const TokenSequences& targets) const {
  ASSIGN_OR_RETURN(PaddedBatch h, Decode(sources, targets));
  return LinearRows(LastRows(h), lm_head_);
}

std::optional<KvBlockShape> Seq2Seq::CacheShape(int64_t block_tokens) const {
  return StackCacheShape(*decoder_, block_tokens);
}

absl::StatusOr<std::unique_ptr<GenerationState>> Seq2Seq::Start(const std::vector<int64_t>& source,
                                                                BlockTable* table) const {
  ASSIGN_OR_RETURN(std::unique_ptr<Seq2SeqState> state, EncodeSource(source));
  state->self_attention = NewDecoderState(*decoder_, table);
  return std::unique_ptr<GenerationState>(std::move(state));
}

absl::StatusOr<std::unique_ptr<Seq2SeqState>> Seq2Seq::Start(const std::vector<int64_t>& source,
                                                             int64_t capacity) const {
  ASSIGN_OR_RETURN(std::unique_ptr<Seq2SeqState> state, EncodeSource(source));
  // The decoder's keys and values depend on the source too: its blocks are never shared. At
  // most max_positions, the model's maximum context.
  state->self_attention = NewDecoderState(*decoder_, nullptr, /*share_prefixes=*/false,
                                          std::min(capacity, config_.max_positions));
  return state;
}

absl::StatusOr<std::unique_ptr<Seq2SeqState>> Seq2Seq::EncodeSource(
    const std::vector<int64_t>& source) const {
  ASSIGN_OR_RETURN(PaddedBatch memory, Encode({source}));
  auto state = std::make_unique<Seq2SeqState>();
  ASSIGN_OR_RETURN(state->source, ProjectSources(memory));
  return state;
}

absl::StatusOr<Tensor> Seq2Seq::Advance(std::span<GenerationState* const> states,
                                        const TokenSequences& tokens) const {
  std::vector<Seq2SeqState*> ours;
  for (GenerationState* state : states) ours.push_back(static_cast<Seq2SeqState*>(state));
  return Advance(ours, tokens);
}

absl::StatusOr<Tensor> Seq2Seq::Advance(std::span<Seq2SeqState* const> states,
                                        const TokenSequences& tokens) const {
  if (states.empty()) return absl::InvalidArgumentError("no sequences to advance");
  std::vector<DecoderState*> decoders;
  std::vector<int64_t> starts;
  for (Seq2SeqState* state : states) {
    state->self_attention->FollowTable();
    decoders.push_back(state->self_attention.get());
    starts.push_back(state->self_attention->position);
  }
  RETURN_IF_ERROR(CheckRoomFor(decoders, tokens));
  ASSIGN_OR_RETURN(PaddedBatch x, embedding_.EmbedTokens(tokens, starts));
  std::vector<KeyValues> sources;
  for (size_t i = 0; i < decoder_->layers().size(); ++i) {
    sources.push_back(StackSources(states, i));
  }
  ASSIGN_OR_RETURN(
      PaddedBatch h,
      decoder_->Forward(std::move(x), sources, CachesByLayer(decoders, decoder_->layers().size())));
  for (size_t b = 0; b < states.size(); ++b) {
    decoders[b]->position += h.lengths[b];
    decoders[b]->table->Commit(tokens[b]);
  }
  return LinearRows(LastRows(h), lm_head_);
}

}  // namespace attnserve
