#include <algorithm>

#include "common/status_macros.h"
#include "engine/kernels/normalization.h"
#include "engine/kernels/normalization_checks.h"
#include "engine/kernels/vector_ops.h"
#include "engine/parallel.h"

namespace attnserve {

absl::Status ScaleNorm(const Tensor& x, float g, float eps, Tensor& y) {
  RETURN_IF_ERROR(CheckRowwise("ScaleNorm", x, y));
  const int64_t rows = x.dim(0), dim = x.dim(1);
  ParallelFor(
      rows,
      [&](int64_t r) {
        const float* in = x.row(r);
        float* out = y.row(r);
        const float factor = g / std::max(std::sqrt(vec::Dot(in, in, dim)), eps);
#pragma omp simd
        for (int64_t i = 0; i < dim; ++i) out[i] = in[i] * factor;
      },
      Schedule::kStatic, /*worth_threads=*/rows * dim > 65536);
  return absl::OkStatus();
}

}  // namespace attnserve
