// bfloat16: the top 16 bits of a float (8 exponent bits, 7 mantissa bits), the operand type of
// AVX512_BF16's dot products. Rounding is to nearest, ties to even, as the hardware's
// vcvtne2ps2bf16 rounds; NaN stays NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace attnserve {

inline uint16_t ToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline float FromBf16(uint16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

}  // namespace attnserve
