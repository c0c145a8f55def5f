#include "engine/blocks/pooling_by_attention.h"

namespace attnserve {

absl::StatusOr<PoolingByAttention> PoolingByAttention::Load(WeightReader& weights,
                                                            const std::string& prefix,
                                                            BlockConfig block, int64_t num_seeds) {
  PoolingByAttention pma;
  auto seeds = weights.Take(prefix + ".seeds", {num_seeds, block.dim});
  if (!seeds.ok()) return seeds.status();
  pma.seeds_ = *std::move(seeds);
  auto rff = FeedForward::Load(weights, prefix + ".rff", block.ffn());
  if (!rff.ok()) return rff.status();
  pma.rff_ = *std::move(rff);
  block.self_attention = false;
  block.causal = false;
  block.cross_attention = true;
  block.alibi = false;
  block.rotary = {};
  block.window = 0;
  auto mab = TransformerBlock::Load(weights, prefix + ".block", block);
  if (!mab.ok()) return mab.status();
  pma.block_.emplace(*std::move(mab));
  return pma;
}

absl::StatusOr<Tensor> PoolingByAttention::Forward(const PaddedBatch& z) const {
  const int64_t batch = z.batch(), dim = seeds_.dim(1);
  if (auto status = CheckPaddedBatch("PMA input", z, dim); !status.ok()) return status;
  Tensor transformed(z.values.shape());
  if (auto status = rff_.Apply(z.values, transformed, false); !status.ok()) return status;
  ZeroPadding(transformed, z.lengths);
  auto memory = block_->ProjectMemory({transformed, z.lengths});
  if (!memory.ok()) return memory.status();
  return block_->Forward(RepeatForBatch(seeds_, batch), &*memory);
}

}  // namespace attnserve
