#include "engine/blocks/pooling_by_attention.h"

#include "common/status_macros.h"

namespace attnserve {

absl::StatusOr<PoolingByAttention> PoolingByAttention::Load(WeightReader& weights,
                                                            const std::string& prefix,
                                                            BlockConfig block, int64_t num_seeds) {
  PoolingByAttention pma;
  ASSIGN_OR_RETURN(pma.seeds_, weights.Take(prefix + ".seeds", {num_seeds, block.dim}));
  ASSIGN_OR_RETURN(pma.rff_, FeedForward::Load(weights, prefix + ".rff", block.ffn()));
  block.self_attention = false;
  block.causal = false;
  block.cross_attention = true;
  block.alibi = false;
  block.rotary = {};
  block.window = 0;
  ASSIGN_OR_RETURN(pma.block_, TransformerBlock::Load(weights, prefix + ".block", block));
  return pma;
}

absl::StatusOr<Tensor> PoolingByAttention::Forward(const PaddedBatch& z) const {
  const int64_t batch = z.batch(), dim = seeds_.dim(1);
  RETURN_IF_ERROR(CheckPaddedBatch("PMA input", z, dim));
  Tensor transformed(z.values.shape());
  RETURN_IF_ERROR(rff_.Apply(z.values, transformed, false));
  ZeroPadding(transformed, z.lengths);
  ASSIGN_OR_RETURN(KeyValues memory, block_->ProjectMemory({transformed, z.lengths}));
  return block_->Forward(RepeatForBatch(seeds_, batch), &memory);
}

}  // namespace attnserve
