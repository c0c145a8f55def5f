#include "engine/kernels/activations.h"

#include <cmath>

#include "engine/kernels/vector_ops.h"

namespace attnserve {

void ReluInPlace(float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void GeluErfInPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * float(M_SQRT1_2)));
}

void GeluTanhInPlace(float* x, int64_t n) {
  const float k = std::sqrt(2.0f / float(M_PI));
  int64_t i = 0;
#ifdef ATTNSERVE_AVX2
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256 inner = _mm256_mul_ps(
        _mm256_set1_ps(k),
        _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), _mm256_mul_ps(v, v)), v, v));
    __m256 t = _mm256_add_ps(_mm256_set1_ps(1.0f), vec::Tanh(inner));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), t));
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
}

void SiluInPlace(float* x, int64_t n) {
  int64_t i = 0;
#ifdef ATTNSERVE_AVX2
  // vec::Exp clamps its argument, so e^-x neither overflows nor turns into NaN for large |x|.
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 e = vec::Exp(_mm256_sub_ps(_mm256_setzero_ps(), v));
    _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
  }
#endif
  for (; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void EluPlusOneInPlace(float* x, int64_t n) {
  int64_t i = 0;
#ifdef ATTNSERVE_AVX2
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256 positive = _mm256_add_ps(v, _mm256_set1_ps(1.0f));
    __m256 negative = vec::Exp(v);  // elu(x) + 1 = e^x for x <= 0
    _mm256_storeu_ps(x + i, _mm256_blendv_ps(negative, positive,
                                             _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ)));
  }
#endif
  for (; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] + 1.0f : std::exp(x[i]);
}

void ExpInPlace(float* x, int64_t n) {
  int64_t i = 0;
#ifdef ATTNSERVE_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, vec::Exp(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::exp(x[i]);
}

void ActivateInPlace(Activation activation, float* x, int64_t n) {
  switch (activation) {
    case Activation::kRelu:
      return ReluInPlace(x, n);
    case Activation::kGeluErf:
      return GeluErfInPlace(x, n);
    case Activation::kGeluTanh:
      return GeluTanhInPlace(x, n);
    case Activation::kSilu:
      return SiluInPlace(x, n);
    case Activation::kNone:
      return;
  }
}

void ApplyFeatureMap(FeatureMap map, float* x, int64_t n) {
  switch (map) {
    case FeatureMap::kEluPlusOne:
      EluPlusOneInPlace(x, n);
      return;
    case FeatureMap::kExp:
      ExpInPlace(x, n);
      return;
  }
}

}  // namespace attnserve
