// Decoder-only language model: input embedding, causal blocks (layers.N), final_norm for
// pre-norm stacks, and an LM head (lm_head.weight, or embed_tokens.weight when tied).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/architectures/input_embedding.h"
#include "engine/architectures/layer_stack.h"
#include "engine/architectures/servable_model.h"
#include "engine/blocks/classification_head.h"

namespace attnserve {

// One sequence's decoding state: its blocks in the pool, a cache per layer over them, and the
// number of tokens seen.
struct DecoderState final : GenerationState {
  // `table` lists the cache's blocks: the caller's (a server's scheduler owns its sequences'
  // tables and their blocks), or `own_table`, over `own_pool` or a pool the caller shares.
  DecoderState(std::unique_ptr<KvBlockPool> own_pool, std::unique_ptr<BlockTable> own_table,
               BlockTable* table)
      : own_pool(std::move(own_pool)), own_table(std::move(own_table)), table(table) {}
  DecoderState(const DecoderState&) = delete;
  DecoderState& operator=(const DecoderState&) = delete;
  DecoderState& decoder() override { return *this; }

  // Starts the state with the published blocks of `prompt`'s longest cached prefix (leaving at
  // least one token to feed); returns the tokens reused. Only on a fresh state.
  int64_t ReusePrefix(std::span<const int64_t> prompt);
  // Frees the blocks and forgets every token (a preempted sequence, to be recomputed). Not for
  // linear attention, whose state is not in blocks.
  void Reset();
  // Takes the tokens the table holds as the ones cached: its owner may have filled it with a
  // reused prefix, or cleared it (a preemption), since the last tokens were fed.
  void FollowTable();

  std::unique_ptr<KvBlockPool> own_pool;  // declared before the table, which releases into it
  std::unique_ptr<BlockTable> own_table;
  BlockTable* table;
  std::vector<LayerCache> layers;
  int64_t position = 0;
};

// Per layer, the caches of every sequence in a batch: the shape LayerStack::Forward takes.
std::vector<std::vector<LayerCache*>> CachesByLayer(std::span<DecoderState* const> states,
                                                    size_t layers);
// The cache shape of a stack's layers (all alike); nullopt for linear attention.
std::optional<KvBlockShape> StackCacheShape(const LayerStack& stack, int64_t block_tokens);
// A state over `pool` (or a private pool when null and the stack caches keys) with a cache per
// layer of `stack`; `capacity` tokens reserved when the pool is private.
std::unique_ptr<DecoderState> NewDecoderState(const LayerStack& stack, KvBlockPool* pool,
                                              bool share_prefixes, int64_t capacity);
// A state whose cache lives in the blocks of the caller's `table`, which the caller reserves
// before each Advance and frees.
std::unique_ptr<DecoderState> NewDecoderState(const LayerStack& stack, BlockTable* table);
// Refuses feeding tokens[b] to states[b] when it would overflow the cache.
absl::Status CheckRoomFor(std::span<DecoderState* const> states, const TokenSequences& tokens);

class CausalLM final : public ServableModel {
 public:
  static absl::StatusOr<std::unique_ptr<CausalLM>> Load(const ModelConfig& config,
                                                        WeightReader& weights);

  // Logits [B, T, vocab] at every position of every sequence, in one pass (zero on padding).
  absl::StatusOr<Tensor> Logits(const TokenSequences& sequences) const;

  // Next-token logits [B, vocab] after each sequence's last token, in one pass without caches.
  absl::StatusOr<Tensor> LastLogits(const TokenSequences& sequences) const;

  // The blocks a pool for this model holds; nullopt when no layer caches keys (linear
  // attention keeps a constant-size state instead).
  std::optional<KvBlockShape> CacheShape(int64_t block_tokens) const override;
  // A fresh state whose keys and values go to `pool` (null for linear attention) in blocks
  // the caller reserves (state->table.Reserve) before each Advance.
  std::unique_ptr<DecoderState> NewState(KvBlockPool* pool) const;
  // A fresh state with a private pool and room for `capacity` tokens (at most max_positions,
  // the model's maximum context), all reserved here, once.
  std::unique_ptr<DecoderState> NewState(int64_t capacity) const;
  // Feeds tokens[b] (a prompt, or the next token) to states[b], all sequences in one batch.
  // Returns the logits after each sequence's last fed token, [B, vocab]. On error no state
  // changes.
  absl::StatusOr<Tensor> Advance(std::span<DecoderState* const> states,
                                 const TokenSequences& tokens) const;

  const ModelConfig& config() const { return config_; }

  // ServableModel: NextToken, Score and Generate; a sequence classifier Classify alone, on its
  // last token's state.
  bool Answers(ModelMethod method) const override {
    if (head_) return method == ModelMethod::kClassify;
    return method == ModelMethod::kNextToken || method == ModelMethod::kGenerate ||
           method == ModelMethod::kScore;
  }
  absl::StatusOr<Tensor> Classify(const ModelInputs& inputs) const override;
  int64_t num_layers() const override { return config_.num_layers; }
  absl::StatusOr<Tensor> NextTokenLogits(const TokenSequences& sources,
                                         const TokenSequences& sequences) const override;
  absl::StatusOr<Tensor> Logits(const TokenSequences& sources,
                                const TokenSequences& sequences) const override;
  bool SharesCachePrefixes() const override { return CachesDependOnTokensAlone(); }
  absl::StatusOr<std::unique_ptr<GenerationState>> Start(const std::vector<int64_t>& source,
                                                         BlockTable* table) const override;
  absl::StatusOr<Tensor> Advance(std::span<GenerationState* const> states,
                                 const TokenSequences& tokens) const override;

 private:
  // The final states of every position, in one pass without caches.
  absl::StatusOr<PaddedBatch> Forward(const TokenSequences& sequences) const;

  // Whether cached keys and values depend on the tokens alone, so that sequences may share
  // published prefix blocks.
  bool CachesDependOnTokensAlone() const;

  ModelConfig config_;
  InputEmbedding embedding_;
  std::optional<LayerStack> stack_;
  LinearWeights lm_head_;  // [vocab, dim]
  std::optional<ClassificationHead> head_;
};

}  // namespace attnserve
