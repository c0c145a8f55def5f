#include "engine/kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/kernels/vector_ops.h"

namespace attnserve {

void MaskedSoftmaxRow(float* row, int64_t valid, int64_t width) {
  if (valid > 0) {
    const float max = vec::Max(row, valid);
    const float sum = vec::ExpShiftedSum(row, valid, max);
    vec::Scale(row, valid, 1.0f / sum);
  }
  std::fill(row + std::max<int64_t>(valid, 0), row + width, 0.0f);
}

void MaskedLogSoftmaxRow(float* row, int64_t valid, int64_t width) {
  if (valid > 0) {
    const float max = vec::Max(row, valid);
    float sum = 0.0f;
    for (int64_t i = 0; i < valid; ++i) sum += std::exp(row[i] - max);
    const float shift = max + std::log(sum);
    for (int64_t i = 0; i < valid; ++i) row[i] -= shift;
  }
  std::fill(row + std::max<int64_t>(valid, 0), row + width,
            -std::numeric_limits<float>::infinity());
}

}  // namespace attnserve
