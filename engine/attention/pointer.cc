#include "engine/attention/pointer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/kernels/softmax.h"
#include "engine/kernels/vector_ops.h"
#include "engine/matmul.h"
#include "engine/parallel.h"

namespace attnserve {
namespace {

// Σ_a v[a] tanh(e[a] + d[a])
float AdditiveScore(const float* e, const float* d, const float* v, int64_t width) {
  int64_t a = 0;
  float sum = 0.0f;
#ifdef ATTNSERVE_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; a + 8 <= width; a += 8) {
    const __m256 t = vec::Tanh(_mm256_add_ps(_mm256_loadu_ps(e + a), _mm256_loadu_ps(d + a)));
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(v + a), t, acc);
  }
  sum = vec::HorizontalSum(acc);
#endif
  for (; a < width; ++a) sum += v[a] * std::tanh(e[a] + d[a]);
  return sum;
}

}  // namespace

absl::StatusOr<PointerAttention> PointerAttention::Create(PointerAttentionWeights weights) {
  const Tensor& w1 = weights.memory_weight;
  const Tensor& w2 = weights.query_weight;
  const Tensor& v = weights.score_weight;
  if (w1.rank() != 2 || !w1.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("memory_proj.weight has shape ",
                                                   w1.ShapeString(), ", expected [A, memory_dim]"));
  }
  const int64_t width = w1.dim(0);
  if (w2.rank() != 2 || w2.dim(0) != width || !w2.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("query_proj.weight has shape ", w2.ShapeString(),
                                                   ", expected [", width, ", query_dim]"));
  }
  if (v.shape() != Shape{1, width} || !v.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("score.weight has shape ", v.ShapeString(), ", expected [1, ", width, "]"));
  }
  return PointerAttention(std::move(weights));
}

absl::StatusOr<Tensor> PointerAttention::Forward(const PaddedBatch& queries,
                                                 const PaddedBatch& memory) const {
  const int64_t width = weights_.score_weight.dim(1);
  RETURN_IF_ERROR(CheckPaddedBatch("pointer queries", queries, weights_.query_weight.dim(1)));
  RETURN_IF_ERROR(CheckPaddedBatch("pointer memory", memory, weights_.memory_weight.dim(1)));
  if (memory.batch() != queries.batch()) {
    return absl::InvalidArgumentError(absl::StrCat("pointer memory has batch ", memory.batch(),
                                                   ", queries have ", queries.batch()));
  }
  ASSIGN_OR_RETURN(Tensor projected_memory,
                   LinearRows(memory.values, weights_.memory_weight, Tensor()));
  ASSIGN_OR_RETURN(Tensor projected_queries,
                   LinearRows(queries.values, weights_.query_weight, Tensor()));

  const int64_t batch = queries.batch(), tq = queries.time(), tm = memory.time();
  Tensor log_probs({batch, tq, tm});
  const float* v = weights_.score_weight.data();
  ParallelFor(
      batch * tq,
      [&](int64_t index) {
        const int64_t b = index / tq, i = index % tq;
        float* row = log_probs.data() + (b * tq + i) * tm;
        if (i >= queries.lengths[b]) {
          std::fill(row, row + tm, 0.0f);
          return;
        }
        const float* d = projected_queries.Select(b).row(i);
        const int64_t m_len = memory.lengths[b];
        for (int64_t j = 0; j < m_len; ++j) {
          row[j] = AdditiveScore(projected_memory.Select(b).row(j), d, v, width);
        }
        MaskedLogSoftmaxRow(row, m_len, tm);
      },
      Schedule::kDynamic);
  return log_probs;
}

}  // namespace attnserve
