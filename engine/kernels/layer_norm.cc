#include "common/status_macros.h"
#include "engine/kernels/normalization.h"
#include "engine/kernels/normalization_checks.h"
#include "engine/kernels/vector_ops.h"
#include "engine/parallel.h"

namespace attnserve {

absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y) {
  RETURN_IF_ERROR(CheckRowwise("LayerNorm", x, y));
  const int64_t rows = x.dim(0), dim = x.dim(1);
  RETURN_IF_ERROR(CheckVector("LayerNorm", "gamma", gamma, dim));
  if (!beta.empty()) {
    RETURN_IF_ERROR(CheckVector("LayerNorm", "beta", beta, dim));
  }
  const float* g = gamma.data();
  const float* b = beta.empty() ? nullptr : beta.data();
  ParallelFor(
      rows,
      [&](int64_t r) {
        const float* in = x.row(r);
        float* out = y.row(r);
        const float mean = vec::Sum(in, dim) / static_cast<float>(dim);
        float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
        for (int64_t i = 0; i < dim; ++i) squares += (in[i] - mean) * (in[i] - mean);
        const float inv_std = 1.0f / std::sqrt(squares / static_cast<float>(dim) + eps);
#pragma omp simd
        for (int64_t i = 0; i < dim; ++i) {
          out[i] = (in[i] - mean) * inv_std * g[i] + (b != nullptr ? b[i] : 0.0f);
        }
      },
      Schedule::kStatic, /*worth_threads=*/rows * dim > 65536);
  return absl::OkStatus();
}

}  // namespace attnserve
