#include "engine/blocks/feed_forward.h"

namespace attnserve {

absl::StatusOr<FeedForward> FeedForward::Load(WeightReader& weights, const std::string& prefix,
                                              int64_t dim, int64_t hidden, int64_t out_dim,
                                              bool bias, Activation activation) {
  FeedForward ffn;
  ffn.activation_ = activation;
  for (auto [name, tensor, shape] :
       {std::tuple{".fc1.weight", &ffn.fc1_weight_, Shape{hidden, dim}},
        std::tuple{".fc2.weight", &ffn.fc2_weight_, Shape{out_dim, hidden}}}) {
    auto loaded = weights.Take(prefix + name, shape);
    if (!loaded.ok()) return loaded.status();
    *tensor = *std::move(loaded);
  }
  for (auto [name, tensor, size] : {std::tuple{".fc1.bias", &ffn.fc1_bias_, hidden},
                                    std::tuple{".fc2.bias", &ffn.fc2_bias_, out_dim}}) {
    auto loaded = weights.TakeIf(bias, prefix + name, {size});
    if (!loaded.ok()) return loaded.status();
    *tensor = *std::move(loaded);
  }
  return ffn;
}

absl::Status FeedForward::Apply(const Tensor& x, Tensor& y, bool accumulate) const {
  auto hidden = LinearRows(x, fc1_weight_, fc1_bias_, {false, activation_});
  if (!hidden.ok()) return hidden.status();
  if (!y.is_contiguous())
    return absl::InvalidArgumentError("FeedForward output must be contiguous");
  Tensor out = y.FlattenRows();
  return Linear(hidden->FlattenRows(), fc2_weight_, fc2_bias_, out, {accumulate});
}

}  // namespace attnserve
