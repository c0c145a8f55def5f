// Compiled with AVX-512 F/BW/VNNI (engine/CMakeLists.txt) and called only where the CPU has them.
#if defined(__GNUC__) && !defined(__clang__)
// As in int8_panel_avx512.cc: GCC 12 warns about its own intrinsics' undefined vectors.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/int4_panel_products.h"

namespace attnserve {
namespace {

static_assert(kInt4Group == kInt8ActivationBlock && kInt8PanelWidth == 64);

// 16 of a group's scales (or minimums) from value `offset` on.
inline __m512 Load16(Int4Scales scales, int offset) {
  if (scales.halves != nullptr) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales.halves + offset)));
  }
  return _mm512_loadu_ps(scales.floats + offset);
}

inline __m512i Broadcast4(const int8_t* values) {
  int32_t four;
  std::memcpy(&four, values, sizeof four);
  return _mm512_set1_epi32(four);
}

// Per group, the 16 vectors of levels (nibbles of 32 inputs for 64 columns) go through VPDPBUSD
// against each row's activations into one int32 accumulator per row and 16 columns; with one or
// two rows, low and high nibbles have accumulators of their own, so that enough independent sums
// hide VPDPBUSD's latency. The int32 sums are scaled once per group, and the minimums meet each
// row's sum of activations.
template <int kRows>
void Products(const Int8Row* x, const uint8_t* panel, Int4Scales group_scales, int64_t k,
              float block[kInt8PanelMaxRows][kInt8PanelWidth]) {
  constexpr int kSplit = kRows <= 2 ? 2 : 1;
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  __m512 sums[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int m = 0; m < 4; ++m) sums[r][m] = _mm512_setzero_ps();
  }
  for (int64_t g = 0; g < k / kInt4Group; ++g) {
    const uint8_t* group = panel + g * kInt4GroupBytes;
    const Int4Scales h = group_scales.Group(g);
    __m512i acc[kRows][4][kSplit];
    for (int r = 0; r < kRows; ++r) {
      for (int m = 0; m < 4; ++m) {
        for (int t = 0; t < kSplit; ++t) acc[r][m][t] = _mm512_setzero_si512();
      }
    }
    for (int s = 0; s < 4; ++s) {
      for (int m = 0; m < 4; ++m) {
        const __m512i levels = _mm512_loadu_si512(group + (4 * m + s) * 64);
        const __m512i low = _mm512_and_si512(levels, nibble);
        const __m512i high = _mm512_and_si512(_mm512_srli_epi16(levels, 4), nibble);
        for (int r = 0; r < kRows; ++r) {
          const int8_t* values = x[r].values + g * kInt4Group + 8 * s;
          acc[r][m][0] = _mm512_dpbusd_epi32(acc[r][m][0], low, Broadcast4(values));
          acc[r][m][kSplit - 1] =
              _mm512_dpbusd_epi32(acc[r][m][kSplit - 1], high, Broadcast4(values + 4));
        }
      }
    }
    for (int m = 0; m < 4; ++m) {
      const __m512 scales = Load16(h, 16 * m);
      const __m512 mins = Load16(h, kInt8PanelWidth + 16 * m);
      for (int r = 0; r < kRows; ++r) {
        const __m512i products =
            kSplit == 2 ? _mm512_add_epi32(acc[r][m][0], acc[r][m][kSplit - 1]) : acc[r][m][0];
        const float x_scale = x[r].scales[g];
        // offsets[g] = -128 · Σ values of the block (exact in int32).
        const float x_sum = x_scale * static_cast<float>(-x[r].offsets[g] / 128);
        sums[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(products),
                                     _mm512_mul_ps(scales, _mm512_set1_ps(x_scale)), sums[r][m]);
        sums[r][m] = _mm512_fmadd_ps(mins, _mm512_set1_ps(x_sum), sums[r][m]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int m = 0; m < 4; ++m) _mm512_storeu_ps(block[r] + 16 * m, sums[r][m]);
  }
}

}  // namespace

void Int4PanelProductsVnni(const Int8Row* x, int rows, const uint8_t* panel, Int4Scales scales,
                           int64_t k, float block[kInt8PanelMaxRows][kInt8PanelWidth]) {
  switch (rows) {
    case 1:
      return Products<1>(x, panel, scales, k, block);
    case 2:
      return Products<2>(x, panel, scales, k, block);
    case 3:
      return Products<3>(x, panel, scales, k, block);
    default:
      return Products<4>(x, panel, scales, k, block);
  }
}

}  // namespace attnserve
