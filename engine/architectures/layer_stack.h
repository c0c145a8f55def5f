// A stack of blocks (layers.N under a prefix) followed, in pre-norm models, by final_norm: the
// trunk that every architecture runs its residual stream through.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/blocks/norm.h"
#include "engine/blocks/transformer_block.h"

namespace attnserve {

class LayerStack {
 public:
  // Reads `<prefix>layers.{i}` for i < count and, when pre-norm, `<prefix>final_norm`.
  static absl::StatusOr<LayerStack> Load(WeightReader& weights, const std::string& prefix,
                                         const ModelConfig& config, const BlockConfig& block,
                                         int64_t count);

  // memories[i]: layer i's cross-attention keys and values (empty span: no cross-attention);
  // caches[i]: layer i's caches, one per sequence (empty: no caches).
  // heads, when given, maps layer indices to receive that layer's self-attention head outputs
  // (TransformerBlock::Forward's self_heads).
  absl::StatusOr<PaddedBatch> Forward(PaddedBatch x, std::span<const KeyValues> memories = {},
                                      std::span<const std::vector<LayerCache*>> caches = {},
                                      std::map<int64_t, Tensor>* heads = nullptr) const;

  const std::vector<TransformerBlock>& layers() const { return layers_; }

 private:
  std::vector<TransformerBlock> layers_;
  std::optional<Norm> final_norm_;
};

}  // namespace attnserve
