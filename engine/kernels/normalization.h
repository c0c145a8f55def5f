// Row-wise normalizations over [rows, dim] tensors (unit inner stride; `y` may alias `x`).
#pragma once

#include "absl/status/status.h"
#include "engine/tensor.h"

namespace attnserve {

// (x - mean) / sqrt(var + eps) * gamma + beta  (Ba et al. 2016); beta may be empty.
absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y);

// x / sqrt(mean(x²) + eps) * gain  (Zhang & Sennrich 2019): the RMS, i.e. ||x|| / sqrt(dim).
absl::Status RmsNorm(const Tensor& x, const Tensor& gain, float eps, Tensor& y);

// g * x / max(||x||, eps) with one learned scalar g  (Nguyen & Salazar 2019).
absl::Status ScaleNorm(const Tensor& x, float g, float eps, Tensor& y);

}  // namespace attnserve
