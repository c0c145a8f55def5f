// The inner product of decoding from int8 weights (QuantizedWeight's panel layout): for up to
// four rows x_r and one panel of 64 output columns,
//
//   block[r][c] = Σ_g scale[g][c] · Σ_{i in group g} x_r[i] · values[i][c]
//
// The int8 values are widened to float in registers and multiplied in float: the activations are
// not quantized, so the only error is the weights' own. One function per instruction set; the
// AVX-512 one lives in a file compiled for AVX-512 that includes nothing else of the engine (its
// inline functions must not replace the AVX2 build's).
#pragma once

#include <cstdint>

namespace attnserve {

inline constexpr int kInt8PanelWidth = 64;
inline constexpr int kInt8PanelMaxRows = 4;

// x: `rows` pointers to k floats; panel: [k, 64] int8; scales: [ceil(k / group_size), 64].
void Int8PanelProductsAvx2(const float* const* x, int rows, const int8_t* panel,
                           const float* scales, int64_t k, int64_t group_size,
                           float block[kInt8PanelMaxRows][kInt8PanelWidth]);
void Int8PanelProductsAvx512(const float* const* x, int rows, const int8_t* panel,
                             const float* scales, int64_t k, int64_t group_size,
                             float block[kInt8PanelMaxRows][kInt8PanelWidth]);

}  // namespace attnserve
