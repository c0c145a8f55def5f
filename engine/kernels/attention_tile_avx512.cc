#include <immintrin.h>

#include "engine/kernels/attention_tile.h"

namespace attnserve {

void AttentionTileAvx512(const float* const a[4], const float* b, int64_t ld, int64_t steps,
                         float* const out[4]) {
  __m512 acc[4][2];
  for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    const __m512 b0 = _mm512_loadu_ps(b + s * ld);
    const __m512 b1 = _mm512_loadu_ps(b + s * ld + 16);
    for (int r = 0; r < 4; ++r) {
      const __m512 as = _mm512_set1_ps(a[r][s]);
      acc[r][0] = _mm512_fmadd_ps(as, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(as, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    _mm512_storeu_ps(out[r], acc[r][0]);
    _mm512_storeu_ps(out[r] + 16, acc[r][1]);
  }
}

}  // namespace attnserve
