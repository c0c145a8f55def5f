// ISAB (Lee et al. 2019, Set Transformer): attention over a set through m learned inducing
// points, O(n·m) instead of O(n²): H = MAB(I, X), then ISAB(X) = MAB(X, H).
// Tensors: <prefix>.inducing_points [m, dim], <prefix>.induce.* and <prefix>.attend.* (two
// cross-attention blocks, MAB).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/blocks/transformer_block.h"

namespace attnserve {

class InducedSetAttention {
 public:
  static absl::StatusOr<InducedSetAttention> Load(WeightReader& weights, const std::string& prefix,
                                                  BlockConfig block, int64_t num_inducing);

  // x: [B, T, dim] -> [B, T, dim].
  absl::StatusOr<Tensor> Forward(const PaddedBatch& x) const;

 private:
  Tensor inducing_points_;
  std::optional<TransformerBlock> induce_, attend_;
};

}  // namespace attnserve
