#include "engine/blocks/norm.h"

#include "engine/kernels/normalization.h"

namespace attnserve {

absl::StatusOr<Norm> Norm::Load(WeightReader& weights, const std::string& prefix, NormKind kind,
                                int64_t dim, float eps) {
  Norm norm;
  norm.kind_ = kind;
  norm.eps_ = eps;
  if (kind == NormKind::kScaleNorm) {
    auto g = weights.Take(prefix + ".g", {});
    if (!g.ok()) return g.status();
    norm.g_ = g->data()[0];
    return norm;
  }
  auto weight = weights.Take(prefix + ".weight", {dim});
  if (!weight.ok()) return weight.status();
  norm.weight_ = *std::move(weight);
  if (kind == NormKind::kLayerNorm) {
    auto bias = weights.Take(prefix + ".bias", {dim});
    if (!bias.ok()) return bias.status();
    norm.bias_ = *std::move(bias);
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
