// PMA_k (Lee et al. 2019, Set Transformer): pools a set into k vectors by letting k learned seed
// vectors attend to it: PMA(Z) = MAB(S, rFF(Z)), MAB being a cross-attention block.
// Tensors: <prefix>.seeds [k, dim], <prefix>.rff.* (a FeedForward), <prefix>.block.* (a
// TransformerBlock with cross-attention only).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/blocks/transformer_block.h"

namespace attnserve {

class PoolingByAttention {
 public:
  // block: the settings of the MAB (cross-attention is switched on here).
  static absl::StatusOr<PoolingByAttention> Load(WeightReader& weights, const std::string& prefix,
                                                 BlockConfig block, int64_t num_seeds);

  // z: [B, T, dim] -> [B, k, dim].
  absl::StatusOr<Tensor> Forward(const PaddedBatch& z) const;

 private:
  Tensor seeds_;
  FeedForward rff_;
  std::optional<TransformerBlock> block_;
};

}  // namespace attnserve
