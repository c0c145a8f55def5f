// The inner product of decoding from int8 weights (QuantizedWeight's panel layout): for up to
// four rows x_r and one panel of 64 output columns,
//
//   block[r][c] = Σ_g scale[g][c] · Σ_{i in group g} x_r[i] · values[i][c]
//
// Two ways:
// - Float (AVX2, AVX-512): the int8 values are widened to float in registers and multiplied by
//   float activations, so the only error is the weights' own.
// - Int8 × int8 (AVX512-VNNI): each row of activations is quantized to int8 first, symmetric with
//   a scale per block of 32 inputs (as llama.cpp's q8_0), and VPDPBUSD multiplies four int8 pairs
//   and sums them into an int32 in one instruction: no widening, a quarter of the instructions.
//   Each block's int32 sums are scaled by the weight's and the activation's scales.
// One function per instruction set; each lives in a file compiled for its instruction set that
// includes nothing else of the engine (its inline functions must not replace the AVX2 build's).
#pragma once

#include <cstdint>

namespace attnserve {

inline constexpr int kInt8PanelWidth = 64;
inline constexpr int kInt8PanelMaxRows = 4;
inline constexpr int64_t kInt8ActivationBlock = 32;

// x: `rows` pointers to k floats; panel: [k, 64] int8; scales: [ceil(k / group_size), 64].
void Int8PanelProductsAvx2(const float* const* x, int rows, const int8_t* panel,
                           const float* scales, int64_t k, int64_t group_size,
                           float block[kInt8PanelMaxRows][kInt8PanelWidth]);
void Int8PanelProductsAvx512(const float* const* x, int rows, const int8_t* panel,
                             const float* scales, int64_t k, int64_t group_size,
                             float block[kInt8PanelMaxRows][kInt8PanelWidth]);

// One row of activations quantized for the VNNI kernel, k / kInt8ActivationBlock blocks:
//   values[i] = round(x[i] / scales[b]) in [-127, 127], scales[b] = max |x in block b| / 127,
//   offsets[b] = -128 · Σ values of block b.
// VPDPBUSD multiplies unsigned by signed bytes, so the kernel feeds it the weights plus 128 (their
// sign bit flipped) and starts each block's sum at offsets[b] to take the 128s back out.
struct Int8Row {
  const int8_t* values;
  const float* scales;
  const int32_t* offsets;
};
// Fills values[k], scales and offsets[k / kInt8ActivationBlock] from x[k]; k must be a multiple
// of kInt8ActivationBlock. Rounds half to even, as the CPU's conversions do.
void QuantizeRowVnni(const float* x, int64_t k, int8_t* values, float* scales, int32_t* offsets);
// k must be a multiple of kInt8ActivationBlock, and group_size too (a group_size of k included),
// or 16.
void Int8PanelProductsVnni(const Int8Row* x, int rows, const int8_t* panel, const float* scales,
                           int64_t k, int64_t group_size,
                           float block[kInt8PanelMaxRows][kInt8PanelWidth]);

}  // namespace attnserve
