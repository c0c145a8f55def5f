// A normalization layer as a block uses it: LayerNorm (weight, bias), RMSNorm (weight) or
// ScaleNorm (g), loaded by module path.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/importers/model_config.h"
#include "engine/importers/weight_reader.h"

namespace attnserve {

class Norm {
 public:
  // Reads `<prefix>.weight` and `<prefix>.bias` (LayerNorm), `<prefix>.weight` (RMSNorm) or the
  // scalar `<prefix>.g` (ScaleNorm).
  static absl::StatusOr<Norm> Load(WeightReader& weights, const std::string& prefix, NormKind kind,
                                   int64_t dim, float eps);

  // y = norm(x) row by row over [..., dim]; y may be x.
  absl::Status Apply(const Tensor& x, Tensor& y) const;

 private:
  NormKind kind_ = NormKind::kLayerNorm;
  float eps_ = 0.0f;
  float g_ = 1.0f;
  Tensor weight_, bias_;
};

}  // namespace attnserve
