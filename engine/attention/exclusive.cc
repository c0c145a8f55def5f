#include "engine/attention/exclusive.h"

#include <algorithm>

#include "engine/kernels/vector_ops.h"
#include "engine/parallel.h"

namespace attnserve {

// As torch.nn.functional.normalize: v / max(||v||, eps).
constexpr float kNormalizeEpsilon = 1e-12f;

void RemoveOwnValueComponent(Tensor& heads, const Tensor& v, std::span<const int64_t> q_lengths,
                             std::span<const int64_t> k_lengths, int64_t num_heads,
                             int64_t num_kv_heads) {
  const int64_t batch = heads.dim(0), dv = heads.dim(2) / num_heads;
  const int64_t group = num_heads / num_kv_heads;
  ParallelFor(batch * heads.dim(1), [&](int64_t index) {
    const int64_t b = index / heads.dim(1), i = index % heads.dim(1);
    if (i >= q_lengths[b]) return;
    const int64_t own = k_lengths[b] - q_lengths[b] + i;
    for (int64_t h = 0; h < num_heads; ++h) {
      float* y = heads.data() + b * heads.stride(0) + i * heads.stride(1) + h * dv;
      const float* value = v.data() + b * v.stride(0) + own * v.stride(1) + h / group * dv;
      const float norm = std::max(std::sqrt(vec::Dot(value, value, dv)), kNormalizeEpsilon);
      // y - (y · v/n)(v/n) = y - (y · v / n²) v
      vec::Axpy(-vec::Dot(y, value, dv) / (norm * norm), value, y, dv);
    }
  });
}

}  // namespace attnserve
