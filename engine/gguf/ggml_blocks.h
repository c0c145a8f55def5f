// ggml's tensor types as stored in a GGUF file: each row is a run of blocks of a fixed number of
// elements and bytes (one element of two or four bytes for the float types), and a quantized
// block holds fp16 scales (and mins) beside packed integers. Dequantization follows ggml's
// reference definitions (ggml-quants.c's dequantize_row_*) in float32.
//
// Every result is bit-identical to the reference's, however the compiler orders or fuses the
// arithmetic: an fp16 scale has 11 significant bits and the integers it multiplies at most 13
// (Q6_K's int8 scale times its 6-bit value), so every product is exact in float32's 24 bits,
// and a result is rounded once, at most, where a min is subtracted or added.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "absl/status/status.h"
#include "engine/gguf/gguf_file.h"

namespace attnserve {

struct GgmlBlockLayout {
  int64_t block_size = 0;   // elements per block
  int64_t block_bytes = 0;  // bytes per block
};

// The layout of a type attnserve reads; nullopt for any other value (a type of ggml's that
// attnserve does not read, or no type at all).
std::optional<GgmlBlockLayout> GgmlLayout(GgmlType type);

// Dequantizes `out.size()` elements, a whole number of blocks, from `blocks`, which must hold
// exactly those blocks' bytes (INVALID_ARGUMENT otherwise: nothing is read out of bounds). A
// tensor's rows are each a whole number of blocks and lie back to back, so a tensor is one call.
// Float values (F32, F16, BF16) are widened as they are, NaN and infinity included.
absl::Status DequantizeGgml(GgmlType type, std::span<const uint8_t> blocks, std::span<float> out);

// The grid of a type whose blocks are groups of levels with a scale (and a minimum) each, as
// QuantizedWeight can keep them exactly (engine/weight_grid.h): Q4_0, Q4_1 and Q4_K as 4 bits in
// groups of 32; Q8_0 and Q5_0 as 8 bits in groups of 32, Q3_K and Q6_K in groups of 16 (their
// sub-blocks). nullopt for the others: Q5_1 and Q5_K (5-bit levels with a minimum), Q2_K
// (minimums on sub-blocks of 16), and the float types.
struct GgmlGridShape {
  int bits = 4;
  int64_t group_size = 32;
};
std::optional<GgmlGridShape> GgmlGrid(GgmlType type);

// Each group's scale (and, for 4 bits, minimum) of whole blocks of a type GgmlGrid describes, in
// order: element e's value is level · scales[e / group_size] + minimums[e / group_size], exactly
// as DequantizeGgml computes it. minimums is empty for 8 bits.
absl::Status GgmlGroupScales(GgmlType type, std::span<const uint8_t> blocks,
                             std::span<float> scales, std::span<float> minimums);

// IEEE 754 binary16 to binary32, exactly (integer arithmetic only: the result does not depend
// on the floating-point environment's handling of subnormals).
float Fp16ToFloat(uint16_t half);

}  // namespace attnserve
