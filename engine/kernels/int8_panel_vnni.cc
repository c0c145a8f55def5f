// Compiled with AVX-512 F/BW/VNNI (engine/CMakeLists.txt) and called only where the CPU has them.
#if defined(__GNUC__) && !defined(__clang__)
// As in int8_panel_avx512.cc: GCC 12 warns about its own intrinsics' undefined vectors.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/int8_panel_products.h"

namespace attnserve {
namespace {

static_assert(kInt8ActivationBlock == 32 && kInt8PanelWidth == 64);

// The 4 x 4 transpose of the 128-bit quarters of four vectors: quarter q of out[m] is quarter m of
// in[q]. The byte interleaving below works within quarters, so accumulator m's lane 4q + d holds
// column 16q + 4m + d; this maps panel order to accumulator order and back.
inline void TransposeQuarters(const __m512 in[4], __m512 out[4]) {
  const __m512 low01 = _mm512_shuffle_f32x4(in[0], in[1], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 high01 = _mm512_shuffle_f32x4(in[0], in[1], _MM_SHUFFLE(3, 2, 3, 2));
  const __m512 low23 = _mm512_shuffle_f32x4(in[2], in[3], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 high23 = _mm512_shuffle_f32x4(in[2], in[3], _MM_SHUFFLE(3, 2, 3, 2));
  out[0] = _mm512_shuffle_f32x4(low01, low23, _MM_SHUFFLE(2, 0, 2, 0));
  out[1] = _mm512_shuffle_f32x4(low01, low23, _MM_SHUFFLE(3, 1, 3, 1));
  out[2] = _mm512_shuffle_f32x4(high01, high23, _MM_SHUFFLE(2, 0, 2, 0));
  out[3] = _mm512_shuffle_f32x4(high01, high23, _MM_SHUFFLE(3, 1, 3, 1));
}

// Four rows of a panel (256 bytes) as VPDPBUSD reads them: interleaved so that each int32 lane
// holds one column's four consecutive weights, plus 128 (the sign bit flipped).
inline void Quads(const int8_t* w, __m512i quads[4]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i rows[4];
  for (int t = 0; t < 4; ++t) {
    rows[t] = _mm512_xor_si512(_mm512_loadu_si512(w + t * kInt8PanelWidth), flip);
  }
  const __m512i low01 = _mm512_unpacklo_epi8(rows[0], rows[1]);
  const __m512i high01 = _mm512_unpackhi_epi8(rows[0], rows[1]);
  const __m512i low23 = _mm512_unpacklo_epi8(rows[2], rows[3]);
  const __m512i high23 = _mm512_unpackhi_epi8(rows[2], rows[3]);
  quads[0] = _mm512_unpacklo_epi16(low01, low23);
  quads[1] = _mm512_unpackhi_epi16(low01, low23);
  quads[2] = _mm512_unpacklo_epi16(high01, high23);
  quads[3] = _mm512_unpackhi_epi16(high01, high23);
}

// -128 · Σ of 16 activations: the start of a half block's sum (offsets[b] is the whole block's).
inline int32_t HalfOffset(const int8_t* values) {
  const __m512i wide =
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
  return -128 * _mm512_reduce_add_epi32(wide);
}

// The panel is read front to back, four of its rows at a time, made into quads, which VPDPBUSD
// multiplies by four consecutive activations (one int32 broadcast per row). The int32 sums are
// scaled every kSpan inputs: a block of 32, or each half of it where the weights' groups are 16
// (a GGUF file's Q6_K and Q3_K sub-blocks).
template <int kRows, int kSpan>
void Products(const Int8Row* x, const int8_t* panel, const float* scales, int64_t k,
              int64_t group_size, float block[kInt8PanelMaxRows][kInt8PanelWidth]) {
  static_assert(kSpan == kInt8ActivationBlock || kSpan * 2 == kInt8ActivationBlock);
  __m512 sums[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int m = 0; m < 4; ++m) sums[r][m] = _mm512_setzero_ps();
  }
  const int8_t* w = panel;
  for (int64_t begin = 0; begin < k; begin += kSpan) {
    const int64_t b = begin / kInt8ActivationBlock;
    __m512i acc[kRows][4];
    for (int r = 0; r < kRows; ++r) {
      int32_t offset = x[r].offsets[b];
      if constexpr (kSpan != kInt8ActivationBlock) {
        const int32_t first_half = HalfOffset(x[r].values + b * kInt8ActivationBlock);
        offset = begin % kInt8ActivationBlock == 0 ? first_half : offset - first_half;
      }
      const __m512i start = _mm512_set1_epi32(offset);
      for (int m = 0; m < 4; ++m) acc[r][m] = start;
    }
    for (int64_t i = begin; i < begin + kSpan; i += 4, w += 4 * kInt8PanelWidth) {
      __m512i quads[4];
      Quads(w, quads);
      for (int r = 0; r < kRows; ++r) {
        int32_t four;
        std::memcpy(&four, x[r].values + i, sizeof four);
        const __m512i xv = _mm512_set1_epi32(four);
        for (int m = 0; m < 4; ++m) acc[r][m] = _mm512_dpbusd_epi32(acc[r][m], quads[m], xv);
      }
    }
    const float* s = scales + begin / group_size * kInt8PanelWidth;
    const __m512 panel_order[4] = {_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16),
                                   _mm512_loadu_ps(s + 32), _mm512_loadu_ps(s + 48)};
    __m512 weight_scales[4];
    TransposeQuarters(panel_order, weight_scales);
    for (int r = 0; r < kRows; ++r) {
      const __m512 x_scale = _mm512_set1_ps(x[r].scales[b]);
      for (int m = 0; m < 4; ++m) {
        sums[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][m]),
                                     _mm512_mul_ps(weight_scales[m], x_scale), sums[r][m]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    __m512 columns[4];
    TransposeQuarters(sums[r], columns);
    for (int m = 0; m < 4; ++m) _mm512_storeu_ps(block[r] + 16 * m, columns[m]);
  }
}

template <int kSpan>
void ProductsOf(const Int8Row* x, int rows, const int8_t* panel, const float* scales, int64_t k,
                int64_t group_size, float block[kInt8PanelMaxRows][kInt8PanelWidth]) {
  switch (rows) {
    case 1:
      return Products<1, kSpan>(x, panel, scales, k, group_size, block);
    case 2:
      return Products<2, kSpan>(x, panel, scales, k, group_size, block);
    case 3:
      return Products<3, kSpan>(x, panel, scales, k, group_size, block);
    default:
      return Products<4, kSpan>(x, panel, scales, k, group_size, block);
  }
}

}  // namespace

void QuantizeRowVnni(const float* x, int64_t k, int8_t* values, float* scales, int32_t* offsets) {
  for (int64_t begin = 0, b = 0; begin < k; begin += kInt8ActivationBlock, ++b) {
    const __m512 low = _mm512_loadu_ps(x + begin), high = _mm512_loadu_ps(x + begin + 16);
    const float largest =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(low), _mm512_abs_ps(high)));
    const float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    scales[b] = largest / 127.0f;
    const __m512 factor = _mm512_set1_ps(inverse);
    const __m512i low_values = _mm512_cvtps_epi32(_mm512_mul_ps(low, factor));
    const __m512i high_values = _mm512_cvtps_epi32(_mm512_mul_ps(high, factor));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(values + begin), _mm512_cvtsepi32_epi8(low_values));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(values + begin + 16),
                     _mm512_cvtsepi32_epi8(high_values));
    offsets[b] = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(low_values, high_values));
  }
}

void Int8PanelProductsVnni(const Int8Row* x, int rows, const int8_t* panel, const float* scales,
                           int64_t k, int64_t group_size,
                           float block[kInt8PanelMaxRows][kInt8PanelWidth]) {
  if (group_size % kInt8ActivationBlock == 0) {
    return ProductsOf<kInt8ActivationBlock>(x, rows, panel, scales, k, group_size, block);
  }
  return ProductsOf<kInt8ActivationBlock / 2>(x, rows, panel, scales, k, group_size, block);
}

}  // namespace attnserve
