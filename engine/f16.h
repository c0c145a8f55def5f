// IEEE half precision (binary16: 5 exponent bits, 10 mantissa bits), as a KV cache may store keys
// and values: 3 more mantissa bits than bfloat16 for the same two bytes, over a range that ends at
// 65504. Conversions round to nearest, ties to even, as F16C's vcvtps2ph does; a float beyond the
// range saturates to ±65504 rather than becoming infinite (an infinite key would turn its
// attention scores into NaN); NaN stays NaN.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#ifdef __F16C__
#include <immintrin.h>
#endif

namespace attnserve {

// A half's bits: a type of its own, so that overloads tell it from bfloat16's uint16_t.
enum class Half : uint16_t {};

inline constexpr float kHalfMax = 65504.0f;

// The conversions in integer arithmetic, for CPUs without F16C (and to test against it).
inline Half ToF16Portable(float value) {
  value = std::clamp(value, -kHalfMax, kHalfMax);  // NaN passes through
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<Half>(sign | 0x7e00u);  // NaN
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal, in units of 2^-24, rounded to even.
    const float scaled = std::bit_cast<float>(magnitude) * 16777216.0f;  // exact: a power of two
    const auto units = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(units);
    const uint32_t rounded = units + (rest > 0.5f || (rest == 0.5f && (units & 1u)) ? 1u : 0u);
    return static_cast<Half>(sign | rounded);
  }
  // A normal half: rebias the exponent (127 - 15) and round the 13 dropped mantissa bits.
  const uint32_t rebiased = magnitude - 0x38000000u;
  const uint32_t rounded = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  return static_cast<Half>(sign | rounded);
}

inline float FromF16Portable(Half half) {
  const uint32_t bits = static_cast<uint16_t>(half);
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24
    const float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(value));
  }
  if (exponent == 31) {  // infinity, or NaN made quiet as F16C makes it
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13) |
                                (mantissa != 0 ? 0x400000u : 0u));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline Half ToF16(float value) {
#ifdef __F16C__
  value = std::clamp(value, -kHalfMax, kHalfMax);
  return static_cast<Half>(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
#else
  return ToF16Portable(value);
#endif
}

// to[i] = ToF16(from[i]) for i in [0, n), eight at a time where the CPU has F16C.
inline void ToF16(const float* from, int64_t n, Half* to) {
  int64_t i = 0;
#ifdef __F16C__
  // min(bound, x) and max(-bound, x) return x when it is NaN, as the scalar clamp does.
  const __m256 top = _mm256_set1_ps(kHalfMax), bottom = _mm256_set1_ps(-kHalfMax);
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_max_ps(bottom, _mm256_min_ps(top, _mm256_loadu_ps(from + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) to[i] = ToF16(from[i]);
}

inline float FromF16(Half half) {
#ifdef __F16C__
  return _cvtsh_ss(static_cast<uint16_t>(half));
#else
  return FromF16Portable(half);
#endif
}

}  // namespace attnserve
