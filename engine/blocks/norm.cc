#include "engine/blocks/norm.h"

#include "common/status_macros.h"
#include "engine/kernels/normalization.h"

namespace attnserve {

absl::StatusOr<Norm> Norm::Load(WeightReader& weights, const std::string& prefix, NormKind kind,
                                int64_t dim, float eps) {
  Norm norm;
  norm.kind_ = kind;
  norm.eps_ = eps;
  if (kind == NormKind::kScaleNorm) {
    ASSIGN_OR_RETURN(Tensor g, weights.Take(prefix + ".g", {}));
    norm.g_ = g.data()[0];
    return norm;
  }
  ASSIGN_OR_RETURN(norm.weight_, weights.Take(prefix + ".weight", {dim}));
  if (kind == NormKind::kLayerNorm) {
    ASSIGN_OR_RETURN(norm.bias_, weights.Take(prefix + ".bias", {dim}));
  }
  return norm;
}

absl::Status Norm::Apply(const Tensor& x, Tensor& y) const {
  const Tensor in = x.FlattenRows();
  Tensor out = y.FlattenRows();
  switch (kind_) {
    case NormKind::kLayerNorm:
      return LayerNorm(in, weight_, bias_, eps_, out);
    case NormKind::kRmsNorm:
      return RmsNorm(in, weight_, eps_, out);
    case NormKind::kScaleNorm:
      return ScaleNorm(in, g_, eps_, out);
  }
  return absl::InternalError("unknown norm kind");
}

}  // namespace attnserve
