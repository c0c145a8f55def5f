#include "engine/blocks/induced_set.h"

#include "common/status_macros.h"

namespace attnserve {

absl::StatusOr<InducedSetAttention> InducedSetAttention::Load(WeightReader& weights,
                                                              const std::string& prefix,
                                                              BlockConfig block,
                                                              int64_t num_inducing) {
  InducedSetAttention isab;
  ASSIGN_OR_RETURN(isab.inducing_points_,
                   weights.Take(prefix + ".inducing_points", {num_inducing, block.dim}));
  block.self_attention = false;
  block.cross_attention = true;
  for (auto [name, slot] : {std::pair{".induce", &isab.induce_}, {".attend", &isab.attend_}}) {
    ASSIGN_OR_RETURN(*slot, TransformerBlock::Load(weights, prefix + name, block));
  }
  return isab;
}

absl::StatusOr<Tensor> InducedSetAttention::Forward(const PaddedBatch& x) const {
  ASSIGN_OR_RETURN(KeyValues x_memory, induce_->ProjectMemory(x));
  const PaddedBatch inducing = RepeatForBatch(inducing_points_, x.batch());
  ASSIGN_OR_RETURN(Tensor h, induce_->Forward(inducing, &x_memory));
  ASSIGN_OR_RETURN(KeyValues h_memory, attend_->ProjectMemory({h, inducing.lengths}));
  return attend_->Forward(x, &h_memory);
}

}  // namespace attnserve
