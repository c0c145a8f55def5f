#include "engine/blocks/feed_forward.h"

#include "common/status_macros.h"
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
      ASSIGN_OR_RETURN(parts[i],
                       weights.Take(prefix + names[i] + ".weight", {config.hidden, config.dim}));
      ASSIGN_OR_RETURN(parts[2 + i],
                       weights.TakeIf(config.bias, prefix + names[i] + ".bias", {config.hidden}));
    }
    ffn.fc1_ =
        PrepareStackedLinear({&parts[0], &parts[1]}, {&parts[2], &parts[3]}, weights.format());
  } else {
    ASSIGN_OR_RETURN(ffn.fc1_,
                     weights.TakeLinear(prefix + ".fc1", config.hidden, config.dim, config.bias));
  }
  ASSIGN_OR_RETURN(ffn.fc2_,
                   weights.TakeLinear(prefix + ".fc2", config.out_dim, config.hidden, config.bias));
  return ffn;
}

absl::Status FeedForward::Apply(const Tensor& x, Tensor& y, bool accumulate) const {
  if (!y.is_contiguous()) {
    return absl::InvalidArgumentError("FeedForward output must be contiguous");
  }
  ASSIGN_OR_RETURN(Tensor hidden,
                   gated_ ? LinearRows(x, fc1_) : LinearRows(x, fc1_, {false, activation_}));
  Tensor activated =
      gated_ ? GatedActivation(hidden.FlattenRows(), activation_) : hidden.FlattenRows();
  Tensor out = y.FlattenRows();
  return Linear(activated, fc2_, out, {accumulate});
}

}  // namespace attnserve
