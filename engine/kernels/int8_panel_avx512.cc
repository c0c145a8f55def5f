// Compiled with AVX-512F (engine/CMakeLists.txt) and called only where the CPU has it.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports the deliberately undefined vectors inside its own AVX-512 intrinsics
// (_mm512_undefined_ps) as maybe uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "engine/kernels/int8_panel_products.h"

namespace attnserve {
namespace {

// Four vectors of 16 cover the panel's 64 columns, so every row count keeps its accumulators in
// registers (at most 16 of 32) and the panel is read once, front to back.
template <int kRows>
void Products(const float* const* x, const int8_t* panel, const float* scales, int64_t k,
              int64_t group_size, float block[kInt8PanelMaxRows][kInt8PanelWidth]) {
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(block[r] + 16 * v, _mm512_setzero_ps());
  }
  for (int64_t begin = 0; begin < k; begin += group_size) {
    const int64_t end = begin + group_size < k ? begin + group_size : k;
    __m512 acc[kRows][4];
    for (int r = 0; r < kRows; ++r) {
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
    }
    for (int64_t i = begin; i < end; ++i) {
      const int8_t* w = panel + i * kInt8PanelWidth;
      __m512 xv[kRows];
      for (int r = 0; r < kRows; ++r) xv[r] = _mm512_set1_ps(x[r][i]);
      for (int v = 0; v < 4; ++v) {
        const __m512 wv = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(w + 16 * v))));
        for (int r = 0; r < kRows; ++r) acc[r][v] = _mm512_fmadd_ps(xv[r], wv, acc[r][v]);
      }
    }
    const float* s = scales + begin / group_size * kInt8PanelWidth;
    for (int r = 0; r < kRows; ++r) {
      for (int v = 0; v < 4; ++v) {
        float* out = block[r] + 16 * v;
        _mm512_storeu_ps(
            out, _mm512_fmadd_ps(acc[r][v], _mm512_loadu_ps(s + 16 * v), _mm512_loadu_ps(out)));
      }
    }
  }
}

}  // namespace

void Int8PanelProductsAvx512(const float* const* x, int rows, const int8_t* panel,
                             const float* scales, int64_t k, int64_t group_size,
                             float block[kInt8PanelMaxRows][kInt8PanelWidth]) {
  switch (rows) {
    case 1:
      return Products<1>(x, panel, scales, k, group_size, block);
    case 2:
      return Products<2>(x, panel, scales, k, group_size, block);
    case 3:
      return Products<3>(x, panel, scales, k, group_size, block);
    default:
      return Products<4>(x, panel, scales, k, group_size, block);
  }
}

}  // namespace attnserve
