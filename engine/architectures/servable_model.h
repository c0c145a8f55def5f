// What a loaded model can do, whatever its architecture. The server asks this interface which
// methods a model answers and calls them; it never names an architecture, so that adding one
// touches neither the scheduler nor request validation. Each architecture implements what it
// answers; the rest stays UNIMPLEMENTED (never reached: the server asks Answers first).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/architectures/input_embedding.h"
#include "engine/attention/kv_block_pool.h"
#include "engine/attention/kv_cache.h"
#include "engine/importers/model_config.h"

namespace attnserve {

enum class ModelMethod { kNextToken, kGenerate, kScore, kEmbed, kClassify };

struct DecoderState;

// One sequence being generated: the caches of the tokens it has seen, and for an
// encoder-decoder its encoded source.
class GenerationState {
 public:
  virtual ~GenerationState() = default;
  virtual DecoderState& decoder() = 0;
  // An encoder-decoder's encoded source, dropped to free memory (a preemption); Start encodes it
  // again into a new state.
  virtual bool source_dropped() const { return false; }
  virtual void DropSource() {}
};

// Embed's answer: values [B, rows, width] (zero past each sequence's rows), the rows of each
// sequence (1 for a pooled vector, its tokens for per-token states), its tokens, and per layer
// asked for, the per-head contributions [B, T, H, width].
struct EmbedOutput {
  Tensor values;
  std::vector<int64_t> rows;
  std::vector<int64_t> lengths;
  std::map<int64_t, Tensor> contributions;
};

// Embed's answer for a model that gives each input a set of vectors ([B, rows, width]).
absl::StatusOr<EmbedOutput> VectorSets(absl::StatusOr<Tensor> output);

class ServableModel {
 public:
  virtual ~ServableModel() = default;

  virtual bool Answers(ModelMethod method) const = 0;
  // Encoder-decoders: every sequence comes with a source (NextToken, Score, Generate).
  virtual bool takes_sources() const { return false; }
  // Embed can give per-token states (pooling none) and the per-head contributions of these many
  // layers (encoders).
  virtual bool gives_token_states() const { return false; }
  virtual int64_t num_layers() const = 0;

  // NextToken: logits [B, vocab] after each sequence's last token (`sources` as many, or empty).
  virtual absl::StatusOr<Tensor> NextTokenLogits(const TokenSequences& sources,
                                                 const TokenSequences& sequences) const;
  // Score: logits [B, T, vocab] at every position of each sequence.
  virtual absl::StatusOr<Tensor> Logits(const TokenSequences& sources,
                                        const TokenSequences& sequences) const;
  // Embed with `pooling` (the config's when nullopt; kNone: per-token states).
  virtual absl::StatusOr<EmbedOutput> Embed(const ModelInputs& inputs,
                                            std::optional<Pooling> pooling,
                                            const std::vector<int64_t>& contribution_layers) const;
  // Classify: the classification head's logits [B, num_labels] (config.classifier), before its
  // score activation, the sequences run in EmbedPasses' groups.
  virtual absl::StatusOr<Tensor> Classify(const ModelInputs& inputs) const;
  // The engine passes Embed (and Classify) makes for these inputs: the indices of the sequences
  // each pass takes, padded to its longest. One pass of all of them unless the model says
  // otherwise; the server counts a request's work and memory from these.
  virtual std::vector<std::vector<size_t>> EmbedPasses(const ModelInputs& inputs,
                                                       bool contributions) const;

  // Generate: the blocks a pool of this model's KV cache holds (nullopt: no layer caches keys,
  // as with linear attention); whether sequences may share the published blocks of a common
  // prompt prefix (their keys and values depend on the tokens alone); a new sequence whose
  // cache lives in the blocks of the caller's `table` (which the caller reserves before each
  // Advance, and whose prefix it may have filled), with `source` encoded when the model takes
  // sources; one batch of tokens fed to states[b], giving logits [B, vocab] after each last fed
  // token (on error no state changes). The engine never allocates or frees blocks here.
  virtual std::optional<KvBlockShape> CacheShape(int64_t block_tokens) const;
  virtual bool SharesCachePrefixes() const { return false; }
  virtual absl::StatusOr<std::unique_ptr<GenerationState>> Start(const std::vector<int64_t>& source,
                                                                 BlockTable* table) const;
  virtual absl::StatusOr<Tensor> Advance(std::span<GenerationState* const> states,
                                         const TokenSequences& tokens) const;
};

}  // namespace attnserve
