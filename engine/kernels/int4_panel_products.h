// The inner product of decoding from int4 weights (QuantizedWeight with 4 bits): for up to four
// rows x_r of int8 activations (Int8Row, quantized per block of 32 inputs) and one panel of 64
// output columns,
//
//   block[r][c] = Σ_g Σ_{i in group g} x_r[i] · (scale[g][c] · level[i][c] + min[g][c])
//              = Σ_g xs_r[g] · (scale[g][c] · Σ_i xq_r[i] · level[i][c] + min[g][c] · Σ_i xq_r[i])
//
// with groups of 32 inputs, the same as the activations' blocks. The levels are 0-15, unsigned, so
// they go into VPDPBUSD (AVX512-VNNI) or VPMADDUBSW (AVX2) as they are, against the signed
// activations.
//
// A panel's layout, made for those instructions: group by group, 1024 bytes of levels, then its
// scales and minimums apart (below). Within a group, 16 vectors of 64 bytes, vector 4m + s for
// columns [16m, 16m + 16) and inputs [8s, 8s + 8) of the group:
//
//   byte 4c + d = level[8s + d][16m + c] | level[8s + 4 + d][16m + c] << 4    (c < 16, d < 4)
//
// so that a vector's low nibbles are four consecutive inputs of each of 16 columns in an int32
// lane (what VPDPBUSD multiplies by four activations), its high nibbles the next four, and the
// lanes are in column order. An AVX2 kernel reads each half of a vector (8 columns).
// Scales and minimums: per panel and group, 64 scales then 64 minimums, in column order, as f16
// (5 bits a weight), or as floats where f16 cannot hold them exactly (a GGUF file's Q4_K blocks,
// whose sub-block scales are an f16 times a 6-bit integer: 6 bits a weight).
//
// As with int8_panel_products.h, each instruction set's functions live in a file compiled for it
// that includes nothing else of the engine.
#pragma once

#include <cstdint>

#include "engine/kernels/int8_panel_products.h"

namespace attnserve {

inline constexpr int64_t kInt4Group = 32;
inline constexpr int64_t kInt4GroupBytes = kInt4Group * kInt8PanelWidth / 2;
// f16 values per panel and group: 64 scales, then 64 minimums.
inline constexpr int64_t kInt4GroupHalves = 2 * kInt8PanelWidth;

// A panel's scales and minimums from group `first` on: k / 32 groups of kInt4GroupHalves values,
// f16 bits (halves) or floats (floats), the other pointer null.
struct Int4Scales {
  const uint16_t* halves = nullptr;
  const float* floats = nullptr;

  Int4Scales Group(int64_t g) const {
    return halves != nullptr ? Int4Scales{halves + g * kInt4GroupHalves, nullptr}
                             : Int4Scales{nullptr, floats + g * kInt4GroupHalves};
  }
};

// panel: k / 32 groups of kInt4GroupBytes. k must be a multiple of 32; x's rows quantized by
// QuantizeRowVnni or QuantizeRowAvx2.
void Int4PanelProductsVnni(const Int8Row* x, int rows, const uint8_t* panel, Int4Scales scales,
                           int64_t k, float block[kInt8PanelMaxRows][kInt8PanelWidth]);
void Int4PanelProductsAvx2(const Int8Row* x, int rows, const uint8_t* panel, Int4Scales scales,
                           int64_t k, float block[kInt8PanelMaxRows][kInt8PanelWidth]);

// QuantizeRowVnni's results, bit for bit, with AVX2.
void QuantizeRowAvx2(const float* x, int64_t k, int8_t* values, float* scales, int32_t* offsets);

// One group of a panel dequantized: out[i][c] = scale[c] · level[i][c] + min[c], i < 32, c < 64
// (rows of 64 floats). For the tiles that prefill multiplies (AVX2).
void DequantizeInt4Group(const uint8_t* group, Int4Scales scales,
                         float out[kInt4Group][kInt8PanelWidth]);
// The same rounded to bfloat16 (to nearest, ties to even) in the layout oneDNN's bf16 matmul
// reads (BA16a64b2a): out[(i / 2) · 128 + 2c + i % 2] for input i and column c.
void DequantizeInt4GroupBf16(const uint8_t* group, Int4Scales scales,
                             uint16_t out[kInt4Group * kInt8PanelWidth]);

}  // namespace attnserve
