#include "engine/blocks/induced_set.h"

namespace attnserve {

absl::StatusOr<InducedSetAttention> InducedSetAttention::Load(WeightReader& weights,
                                                              const std::string& prefix,
                                                              BlockConfig block,
                                                              int64_t num_inducing) {
  InducedSetAttention isab;
  auto points = weights.Take(prefix + ".inducing_points", {num_inducing, block.dim});
  if (!points.ok()) return points.status();
  isab.inducing_points_ = *std::move(points);
  block.self_attention = false;
  block.cross_attention = true;
  for (auto [name, slot] : {std::pair{".induce", &isab.induce_}, {".attend", &isab.attend_}}) {
    auto mab = TransformerBlock::Load(weights, prefix + name, block);
    if (!mab.ok()) return mab.status();
    slot->emplace(*std::move(mab));
  }
  return isab;
}

absl::StatusOr<Tensor> InducedSetAttention::Forward(const PaddedBatch& x) const {
  auto x_memory = induce_->ProjectMemory(x);
  if (!x_memory.ok()) return x_memory.status();
  const PaddedBatch inducing = RepeatForBatch(inducing_points_, x.batch());
  auto h = induce_->Forward(inducing, &*x_memory);
  if (!h.ok()) return h.status();
  auto h_memory = attend_->ProjectMemory({*h, inducing.lengths});
  if (!h_memory.ok()) return h_memory.status();
  return attend_->Forward(x, &*h_memory);
}

}  // namespace attnserve
