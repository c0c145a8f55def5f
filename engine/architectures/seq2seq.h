// Encoder-decoder (Vaswani et al. 2017): the source is encoded once (encoder.layers.N,
// encoder.final_norm); decoder blocks (decoder.layers.N: causal self-attention, cross-attention
// to the encoded source, FFN; decoder.final_norm) predict the next target token through lm_head
// (or the tied token embedding). Source and target share embed_tokens and the positions.
#pragma once

#include <memory>
#include <optional>
#include <span>

#include "absl/status/statusor.h"
#include "engine/architectures/causal_lm.h"

namespace attnserve {

// One sequence's decoding state: self-attention caches, and the cross-attention keys and values
// of its encoded source, projected once per decoder layer.
struct Seq2SeqState final : GenerationState {
  DecoderState& decoder() override { return *self_attention; }
  bool source_dropped() const override { return source.empty(); }
  void DropSource() override { source.clear(); }

  std::unique_ptr<DecoderState> self_attention;
  std::vector<KeyValues> source;  // per decoder layer, batch of 1
};

class Seq2Seq final : public ServableModel {
 public:
  static absl::StatusOr<std::unique_ptr<Seq2Seq>> Load(const ModelConfig& config,
                                                       WeightReader& weights);

  // Logits [B, T_target, vocab] at every target position, in one pass.
  absl::StatusOr<Tensor> Logits(const TokenSequences& sources,
                                const TokenSequences& targets) const override;

  // Next-token logits [B, vocab] after each target's last token, in one pass without caches.
  absl::StatusOr<Tensor> LastLogits(const TokenSequences& sources,
                                    const TokenSequences& targets) const;

  // The blocks a pool for the decoder's self-attention holds; nullopt for linear attention.
  std::optional<KvBlockShape> CacheShape(int64_t block_tokens) const override;
  // Encodes the source once; the state then decodes into the blocks of the caller's `table`
  // (never shared: the decoder's keys and values depend on the source too).
  absl::StatusOr<std::unique_ptr<GenerationState>> Start(const std::vector<int64_t>& source,
                                                         BlockTable* table) const override;
  // The same with a private pool and room for `capacity` target tokens.
  absl::StatusOr<std::unique_ptr<Seq2SeqState>> Start(const std::vector<int64_t>& source,
                                                      int64_t capacity) const;
  // Feeds tokens[b] to states[b] (all in one batch); returns [B, vocab] after each last token.
  absl::StatusOr<Tensor> Advance(std::span<Seq2SeqState* const> states,
                                 const TokenSequences& tokens) const;

  const ModelConfig& config() const { return config_; }

  // ServableModel: NextToken, Score and Generate, each with a source.
  bool Answers(ModelMethod method) const override {
    return method == ModelMethod::kNextToken || method == ModelMethod::kGenerate ||
           method == ModelMethod::kScore;
  }
  bool takes_sources() const override { return true; }
  int64_t num_layers() const override { return config_.num_layers; }
  absl::StatusOr<Tensor> NextTokenLogits(const TokenSequences& sources,
                                         const TokenSequences& targets) const override {
    return LastLogits(sources, targets);
  }
  absl::StatusOr<Tensor> Advance(std::span<GenerationState* const> states,
                                 const TokenSequences& tokens) const override;

 private:
  absl::StatusOr<PaddedBatch> Encode(const TokenSequences& sources) const;
  // Per decoder layer, the cross-attention keys and values of an encoded batch.
  absl::StatusOr<std::vector<KeyValues>> ProjectSources(const PaddedBatch& memory) const;
  // A state with the source encoded and no decoder caches yet.
  absl::StatusOr<std::unique_ptr<Seq2SeqState>> EncodeSource(
      const std::vector<int64_t>& source) const;
  // The decoder's final states after each target token.
  absl::StatusOr<PaddedBatch> Decode(const TokenSequences& sources,
                                     const TokenSequences& targets) const;

  ModelConfig config_;
  InputEmbedding embedding_;
  std::optional<LayerStack> encoder_, decoder_;
  LinearWeights lm_head_;
};

}  // namespace attnserve
