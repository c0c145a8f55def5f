// Vectorized building blocks over contiguous float arrays: AVX2+FMA where the build targets it,
// plain loops otherwise. Everything the attention kernels and the norms reduce or map goes
// through these, so accuracy is settled in one place (exp: Cephes polynomial, ~2 ulp).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ATTNSERVE_AVX2 1
#endif

namespace attnserve::vec {

#ifdef ATTNSERVE_AVX2
inline float HorizontalSum(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_shuffle_ps(sum, sum, 1));
  return _mm_cvtss_f32(sum);
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// e^x for 8 lanes; inputs below -88.4 give 0, above 88.4 saturate near FLT_MAX.
inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
  x = _mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  // 2^n built in the exponent field; n = -127 yields exactly 0.
  __m256i exponent = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  exponent = _mm256_max_epi32(exponent, _mm256_setzero_si256());
  return _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(exponent, 23)));
}

// tanh(x) = sign(x) (1 - 2 / (e^{2|x|} + 1)); absolute error ~1e-7.
inline __m256 Tanh(__m256 x) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  __m256 magnitude = _mm256_andnot_ps(sign_mask, x);
  __m256 e = Exp(_mm256_mul_ps(magnitude, _mm256_set1_ps(2.0f)));
  __m256 t =
      _mm256_sub_ps(_mm256_set1_ps(1.0f),
                    _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  return _mm256_or_ps(t, _mm256_and_ps(x, sign_mask));
}
#endif

inline float Tanh(float x) { return std::tanh(x); }

inline float Dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#ifdef ATTNSERVE_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

inline float Sum(const float* a, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#ifdef ATTNSERVE_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(a + i));
  sum = HorizontalSum(acc);
#endif
  for (; i < n; ++i) sum += a[i];
  return sum;
}

inline float Max(const float* a, int64_t n) {
  int64_t i = 0;
  float max = -std::numeric_limits<float>::infinity();
#ifdef ATTNSERVE_AVX2
  __m256 acc = _mm256_set1_ps(max);
  for (; i + 8 <= n; i += 8) acc = _mm256_max_ps(acc, _mm256_loadu_ps(a + i));
  max = HorizontalMax(acc);
#endif
  for (; i < n; ++i) max = a[i] > max ? a[i] : max;
  return max;
}

// a[i] = exp(a[i] - shift); returns the sum of the results.
inline float ExpShiftedSum(float* a, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.0f;
#ifdef ATTNSERVE_AVX2
  __m256 acc = _mm256_setzero_ps();
  const __m256 shift8 = _mm256_set1_ps(shift);
  for (; i + 8 <= n; i += 8) {
    __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(a + i), shift8));
    _mm256_storeu_ps(a + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  sum = HorizontalSum(acc);
#endif
  for (; i < n; ++i) {
    a[i] = std::exp(a[i] - shift);
    sum += a[i];
  }
  return sum;
}

// y[i] += alpha * x[i]
inline void Axpy(float alpha, const float* x, float* y, int64_t n) {
  int64_t i = 0;
#ifdef ATTNSERVE_AVX2
  const __m256 alpha8 = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_fmadd_ps(alpha8, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
#endif
  for (; i < n; ++i) y[i] += alpha * x[i];
}

inline void Scale(float* a, int64_t n, float factor) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) a[i] *= factor;
}

}  // namespace attnserve::vec
