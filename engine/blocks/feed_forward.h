// Position-wise feed-forward network: fc2(activation(fc1(x))), the activation fused into fc1.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/matmul.h"
#include "engine/model/weight_reader.h"

namespace attnserve {

class FeedForward {
 public:
  // Reads `<prefix>.fc1.weight` [hidden, dim], `<prefix>.fc2.weight` [out, hidden] and their
  // biases when `bias`.
  static absl::StatusOr<FeedForward> Load(WeightReader& weights, const std::string& prefix,
                                          int64_t dim, int64_t hidden, int64_t out_dim, bool bias,
                                          Activation activation);

  // x: [..., dim]. With accumulate, y already holds a residual and receives residual + FFN(x)
  // (fused into fc2); otherwise y is overwritten. y: [..., out_dim].
  absl::Status Apply(const Tensor& x, Tensor& y, bool accumulate) const;

 private:
  LinearWeights fc1_, fc2_;
  Activation activation_ = Activation::kGeluErf;
};

}  // namespace attnserve
