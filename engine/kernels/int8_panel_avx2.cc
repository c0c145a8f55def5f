#include <immintrin.h>

#include <algorithm>

#include "engine/kernels/int8_panel_products.h"

namespace attnserve {
namespace {

// With 16 vector registers the 64 columns are taken in groups of kVectors vectors of 8 (all of
// them for one row); the panel is read in slices of kSliceRows rows (16 KB) so that the second
// and later column groups find the slice in L1. Sums within a group are kept in `partial`
// between slices, then scaled into `block` at the group's end.
template <int kRows>
void Products(const float* const* x, const int8_t* panel, const float* scales, int64_t k,
              int64_t group_size, float block[kInt8PanelMaxRows][kInt8PanelWidth]) {
  constexpr int kVectors = kRows == 1 ? 8 : kRows == 2 ? 4 : 2;
  constexpr int64_t kSliceRows = 256;
  alignas(32) float partial[kRows][kInt8PanelWidth];
  for (int r = 0; r < kRows; ++r) std::fill(block[r], block[r] + kInt8PanelWidth, 0.0f);
  for (int64_t begin = 0; begin < k; begin += group_size) {
    const int64_t end = std::min(k, begin + group_size);
    const float* s = scales + begin / group_size * kInt8PanelWidth;
    for (int r = 0; r < kRows; ++r) std::fill(partial[r], partial[r] + kInt8PanelWidth, 0.0f);
    for (int64_t slice = begin; slice < end; slice += kSliceRows) {
      const int64_t slice_end = std::min(end, slice + kSliceRows);
      for (int column = 0; column < kInt8PanelWidth; column += 8 * kVectors) {
        __m256 acc[kRows][kVectors];
        for (int r = 0; r < kRows; ++r) {
          for (int v = 0; v < kVectors; ++v) {
            acc[r][v] = _mm256_load_ps(partial[r] + column + 8 * v);
          }
        }
        const int8_t* w = panel + slice * kInt8PanelWidth + column;
        for (int64_t i = slice; i < slice_end; ++i, w += kInt8PanelWidth) {
          __m256 xv[kRows];
          for (int r = 0; r < kRows; ++r) xv[r] = _mm256_broadcast_ss(x[r] + i);
          for (int v = 0; v < kVectors; ++v) {
            const __m256 wv = _mm256_cvtepi32_ps(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 8 * v))));
            for (int r = 0; r < kRows; ++r) acc[r][v] = _mm256_fmadd_ps(xv[r], wv, acc[r][v]);
          }
        }
        for (int r = 0; r < kRows; ++r) {
          for (int v = 0; v < kVectors; ++v) {
            const int c = column + 8 * v;
            if (slice_end == end) {
              _mm256_storeu_ps(block[r] + c, _mm256_fmadd_ps(acc[r][v], _mm256_loadu_ps(s + c),
                                                             _mm256_loadu_ps(block[r] + c)));
            } else {
              _mm256_store_ps(partial[r] + c, acc[r][v]);
            }
          }
        }
      }
    }
  }
}

}  // namespace

void Int8PanelProductsAvx2(const float* const* x, int rows, const int8_t* panel,
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
