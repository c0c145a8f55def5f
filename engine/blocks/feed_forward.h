// Position-wise feed-forward network: fc2(activation(fc1(x))), the activation fused into fc1;
// or gated (Shazeer 2020, "GLU Variants"): fc2(activation(gate(x)) ⊙ fc1(x)), SwiGLU with silu,
// GEGLU with gelu, ReGLU with relu, fc1 and gate computed by one matmul.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/importers/weight_reader.h"
#include "engine/matmul.h"

namespace attnserve {

struct FeedForwardConfig {
  int64_t dim = 0, hidden = 0, out_dim = 0;
  bool bias = true;
  bool gated = false;
  Activation activation = Activation::kGeluErf;
};

class FeedForward {
 public:
  // Reads `<prefix>.fc1.weight` [hidden, dim], `<prefix>.fc2.weight` [out, hidden], when gated
  // `<prefix>.gate.weight` [hidden, dim], and their biases when `bias`.
  static absl::StatusOr<FeedForward> Load(WeightReader& weights, const std::string& prefix,
                                          const FeedForwardConfig& config);

  // x: [..., dim]. With accumulate, y already holds a residual and receives residual + FFN(x)
  // (fused into fc2); otherwise y is overwritten. y: [..., out_dim].
  absl::Status Apply(const Tensor& x, Tensor& y, bool accumulate) const;

 private:
  LinearWeights fc1_, fc2_;  // gated: fc1_ is [fc1; gate]
  bool gated_ = false;
  Activation activation_ = Activation::kGeluErf;
};

// [N, hidden] = activation(gate) ⊙ up from rows [N, 2·hidden] holding [up | gate]. A new
// contiguous tensor: oneDNN has no fast kernel for fc2 reading rows strided by 2·hidden (it
// fell to ref:any, 700 times slower at SmolLM's widths).
Tensor GatedActivation(const Tensor& rows, Activation activation);

}  // namespace attnserve
