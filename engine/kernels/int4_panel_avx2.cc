// Compiled with AVX2, FMA and F16C (engine/CMakeLists.txt): the int4 kernels of CPUs without
// AVX512-VNNI, and what every CPU uses to quantize activations and dequantize tiles for them.
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/int4_panel_products.h"

namespace attnserve {
namespace {

static_assert(kInt4Group == kInt8ActivationBlock && kInt8PanelWidth == 64);

inline __m256i Broadcast4(const int8_t* values) {
  int32_t four;
  std::memcpy(&four, values, sizeof four);
  return _mm256_set1_epi32(four);
}

// 8 of a group's scales (or minimums) from value `offset` on.
inline __m256 Load8(Int4Scales scales, int offset) {
  if (scales.halves != nullptr) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales.halves + offset)));
  }
  return _mm256_loadu_ps(scales.floats + offset);
}

// Per group and 8 columns: VPMADDUBSW multiplies pairs of levels by pairs of activations into
// int16. A pair is at most 2 · 15 · 127 = 3810, and a group adds 8 pairs per lane (30480), so the
// int16 sums cannot overflow; VPMADDWD then adds neighbouring int16s into each column's int32.
template <int kRows>
void Products(const Int8Row* x, const uint8_t* panel, Int4Scales group_scales, int64_t k,
              float block[kInt8PanelMaxRows][kInt8PanelWidth]) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kInt8PanelWidth; c += 8)
      _mm256_storeu_ps(block[r] + c, _mm256_setzero_ps());
  }
  for (int64_t g = 0; g < k / kInt4Group; ++g) {
    const uint8_t* group = panel + g * kInt4GroupBytes;
    const Int4Scales h = group_scales.Group(g);
    __m256 x_scales[kRows], x_sums[kRows];
    for (int r = 0; r < kRows; ++r) {
      x_scales[r] = _mm256_set1_ps(x[r].scales[g]);
      // offsets[g] = -128 · Σ values of the block (exact in int32).
      x_sums[r] = _mm256_set1_ps(x[r].scales[g] * static_cast<float>(-x[r].offsets[g] / 128));
    }
    for (int column = 0; column < kInt8PanelWidth; column += 8) {
      const int m = column / 16, half = column % 16 / 8;
      __m256i acc[kRows];
      for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_si256();
      for (int s = 0; s < 4; ++s) {
        const __m256i levels = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(group + (4 * m + s) * 64 + 32 * half));
        const __m256i low = _mm256_and_si256(levels, nibble);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(levels, 4), nibble);
        for (int r = 0; r < kRows; ++r) {
          const int8_t* values = x[r].values + g * kInt4Group + 8 * s;
          acc[r] = _mm256_add_epi16(acc[r], _mm256_maddubs_epi16(low, Broadcast4(values)));
          acc[r] = _mm256_add_epi16(acc[r], _mm256_maddubs_epi16(high, Broadcast4(values + 4)));
        }
      }
      const __m256 scales = Load8(h, column);
      const __m256 mins = Load8(h, kInt8PanelWidth + column);
      for (int r = 0; r < kRows; ++r) {
        const __m256 products = _mm256_cvtepi32_ps(_mm256_madd_epi16(acc[r], ones));
        __m256 out = _mm256_loadu_ps(block[r] + column);
        out = _mm256_fmadd_ps(products, _mm256_mul_ps(scales, x_scales[r]), out);
        _mm256_storeu_ps(block[r] + column, _mm256_fmadd_ps(mins, x_sums[r], out));
      }
    }
  }
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline int32_t HorizontalSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void Int4PanelProductsAvx2(const Int8Row* x, int rows, const uint8_t* panel, Int4Scales scales,
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

void QuantizeRowAvx2(const float* x, int64_t k, int8_t* values, float* scales, int32_t* offsets) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // packs below leave the 32-bit groups of four values in this order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t begin = 0, b = 0; begin < k; begin += kInt8ActivationBlock, ++b) {
    __m256 v[4];
    for (int q = 0; q < 4; ++q) v[q] = _mm256_loadu_ps(x + begin + 8 * q);
    const __m256 largest_lanes = _mm256_max_ps(
        _mm256_max_ps(_mm256_and_ps(v[0], magnitude), _mm256_and_ps(v[1], magnitude)),
        _mm256_max_ps(_mm256_and_ps(v[2], magnitude), _mm256_and_ps(v[3], magnitude)));
    const float largest = HorizontalMax(largest_lanes);
    const float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    scales[b] = largest / 127.0f;
    const __m256 factor = _mm256_set1_ps(inverse);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], factor));
    offsets[b] = -128 * HorizontalSum(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                                       _mm256_add_epi32(q[2], q[3])));
    const __m256i bytes =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(values + begin),
                        _mm256_permutevar8x32_epi32(bytes, order));
  }
}

void DequantizeInt4Group(const uint8_t* group, Int4Scales group_scales,
                         float out[kInt4Group][kInt8PanelWidth]) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  // Within each 128-bit lane, byte d of every 32-bit column to the d-th 32 bits; then the lanes'
  // halves together, so that 64-bit part d holds input d of 8 columns.
  const __m256i transpose = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                             0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int column = 0; column < kInt8PanelWidth; column += 8) {
    const int m = column / 16, half = column % 16 / 8;
    const __m256 scales = Load8(group_scales, column);
    const __m256 mins = Load8(group_scales, kInt8PanelWidth + column);
    for (int s = 0; s < 4; ++s) {
      const __m256i levels = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(group + (4 * m + s) * 64 + 32 * half));
      const __m256i nibbles[2] = {_mm256_and_si256(levels, nibble),
                                  _mm256_and_si256(_mm256_srli_epi16(levels, 4), nibble)};
      for (int high = 0; high < 2; ++high) {
        const __m256i rows =
            _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(nibbles[high], transpose), order);
        const __m128i parts[2] = {_mm256_castsi256_si128(rows), _mm256_extracti128_si256(rows, 1)};
        for (int d = 0; d < 4; ++d) {
          const __m128i eight = d % 2 == 0 ? parts[d / 2] : _mm_srli_si128(parts[d / 2], 8);
          const __m256 level = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(eight));
          _mm256_storeu_ps(out[8 * s + 4 * high + d] + column,
                           _mm256_fmadd_ps(level, scales, mins));
        }
      }
    }
  }
}

void DequantizeInt4GroupBf16(const uint8_t* group, Int4Scales scales,
                             uint16_t out[kInt4Group * kInt8PanelWidth]) {
  alignas(32) float rows[kInt4Group][kInt8PanelWidth];
  DequantizeInt4Group(group, scales, rows);
  // bf16 = (bits + 0x7fff + bit 16) >> 16: rounds to nearest, ties to even (the values are
  // finite). A column's two rows go in one 32-bit lane, the even row in the low half.
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i high_half = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const auto rounded = [&](const float* from) {
    const __m256i bits = _mm256_castps_si256(_mm256_load_ps(from));
    return _mm256_add_epi32(_mm256_add_epi32(bits, bias),
                            _mm256_and_si256(_mm256_srli_epi32(bits, 16), one));
  };
  for (int i = 0; i < kInt4Group; i += 2) {
    for (int c = 0; c < kInt8PanelWidth; c += 8) {
      const __m256i even = _mm256_srli_epi32(rounded(rows[i] + c), 16);
      const __m256i odd = _mm256_and_si256(rounded(rows[i + 1] + c), high_half);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i * kInt8PanelWidth + 2 * c),
                          _mm256_or_si256(even, odd));
    }
  }
}

}  // namespace attnserve
