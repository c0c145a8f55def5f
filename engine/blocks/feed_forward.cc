#include "engine/blocks/feed_forward.h"

#include "engine/kernels/activations.h"
#include "engine/parallel.h"

namespace attnserve {

Tensor GatedActivation(const Tensor& rows, Activation activation) {
  const int64_t hidden = rows.dim(1) / 2;
  Tensor out({rows.dim(0), hidden});
  ParallelFor(
      rows.dim(0),
      [&](int64_t r) {
        const float* up = rows.row(r);
        float* o = out.row(r);
        std::copy(up + hidden, up + 2 * hidden, o);
        ActivateInPlace(activation, o, hidden);
#pragma omp simd
        for (int64_t i = 0; i < hidden; ++i) o[i] *= up[i];
      },
      Schedule::kStatic, rows.dim(0) * hidden >= 1 << 15);
  return out;
}

absl::StatusOr<FeedForward> FeedForward::Load(WeightReader& weights, const std::string& prefix,
                                              const FeedForwardConfig& config) {
  FeedForward ffn;
  ffn.activation_ = config.activation;
  ffn.gated_ = config.gated;
  if (config.gated) {
    Tensor parts[4];  // fc1.weight, gate.weight, fc1.bias, gate.bias
    const char* names[] = {".fc1", ".gate"};
    for (int i = 0; i < 2; ++i) {
      auto weight = weights.Take(prefix + names[i] + ".weight", {config.hidden, config.dim});
      if (!weight.ok()) return weight.status();
      parts[i] = *std::move(weight);
      auto bias = weights.TakeIf(config.bias, prefix + names[i] + ".bias", {config.hidden});
      if (!bias.ok()) return bias.status();
      parts[2 + i] = *std::move(bias);
    }
    ffn.fc1_ =
        PrepareStackedLinear({&parts[0], &parts[1]}, {&parts[2], &parts[3]}, weights.format());
  } else {
    auto fc1 = weights.TakeLinear(prefix + ".fc1", config.hidden, config.dim, config.bias);
    if (!fc1.ok()) return fc1.status();
    ffn.fc1_ = *std::move(fc1);
  }
  auto fc2 = weights.TakeLinear(prefix + ".fc2", config.out_dim, config.hidden, config.bias);
  if (!fc2.ok()) return fc2.status();
  ffn.fc2_ = *std::move(fc2);
  return ffn;
}

absl::Status FeedForward::Apply(const Tensor& x, Tensor& y, bool accumulate) const {
  if (!y.is_contiguous()) {
    return absl::InvalidArgumentError("FeedForward output must be contiguous");
  }
  absl::StatusOr<Tensor> hidden =
      gated_ ? LinearRows(x, fc1_) : LinearRows(x, fc1_, {false, activation_});
  if (!hidden.ok()) return hidden.status();
  Tensor activated =
      gated_ ? GatedActivation(hidden->FlattenRows(), activation_) : hidden->FlattenRows();
  Tensor out = y.FlattenRows();
  return Linear(activated, fc2_, out, {accumulate});
}

}  // namespace attnserve
