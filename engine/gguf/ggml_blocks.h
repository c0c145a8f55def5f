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

// IEEE 754 binary16 to binary32, exactly (integer arithmetic only: the result does not depend
// on the floating-point environment's handling of subnormals).
float Fp16ToFloat(uint16_t half);

}  // namespace attnserve
