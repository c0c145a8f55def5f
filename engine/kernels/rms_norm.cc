#include "common/status_macros.h"
#include "engine/kernels/normalization.h"
#include "engine/kernels/normalization_checks.h"
#include "engine/kernels/vector_ops.h"
#include "engine/parallel.h"

namespace attnserve {

absl::Status RmsNorm(const Tensor& x, const Tensor& gain, float eps, Tensor& y) {
  RETURN_IF_ERROR(CheckRowwise("RmsNorm", x, y));
  const int64_t rows = x.dim(0), dim = x.dim(1);
  RETURN_IF_ERROR(CheckVector("RmsNorm", "gain", gain, dim));
  const float* g = gain.data();
  ParallelFor(
      rows,
      [&](int64_t r) {
        const float* in = x.row(r);
        float* out = y.row(r);
        // mean(x²), not sum(x²) / sqrt(dim): the RMS is ||x|| / sqrt(dim).
        const float mean_square = vec::Dot(in, in, dim) / static_cast<float>(dim);
        const float inv_rms = 1.0f / std::sqrt(mean_square + eps);
#pragma omp simd
        for (int64_t i = 0; i < dim; ++i) out[i] = in[i] * inv_rms * g[i];
      },
      Schedule::kStatic, /*worth_threads=*/rows * dim > 65536);
  return absl::OkStatus();
}

}  // namespace attnserve
