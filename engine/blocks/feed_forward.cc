#include "engine/blocks/feed_forward.h"

namespace attnserve {

absl::StatusOr<FeedForward> FeedForward::Load(WeightReader& weights, const std::string& prefix,
                                              int64_t dim, int64_t hidden, int64_t out_dim,
                                              bool bias, Activation activation) {
  FeedForward ffn;
  ffn.activation_ = activation;
  auto fc1 = weights.TakeLinear(prefix + ".fc1", hidden, dim, bias);
  if (!fc1.ok()) return fc1.status();
  ffn.fc1_ = *std::move(fc1);
  auto fc2 = weights.TakeLinear(prefix + ".fc2", out_dim, hidden, bias);
  if (!fc2.ok()) return fc2.status();
  ffn.fc2_ = *std::move(fc2);
  return ffn;
}

absl::Status FeedForward::Apply(const Tensor& x, Tensor& y, bool accumulate) const {
  auto hidden = LinearRows(x, fc1_, {false, activation_});
  if (!hidden.ok()) return hidden.status();
  if (!y.is_contiguous())
    return absl::InvalidArgumentError("FeedForward output must be contiguous");
  Tensor out = y.FlattenRows();
  return Linear(hidden->FlattenRows(), fc2_, out, {accumulate});
}

}  // namespace attnserve
