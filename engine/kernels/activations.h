// Element-wise activations and the linear-attention feature maps, in place on contiguous arrays.
#pragma once

#include <cstdint>

namespace attnserve {

// The activations a linear layer's epilogue or a feed-forward network applies.
enum class Activation { kNone, kRelu, kGeluErf, kGeluTanh, kSilu };

enum class FeatureMap {
  kEluPlusOne,  // elu(x) + 1  (Katharopoulos et al. 2020)
  kExp,         // exp(x)      (Shen et al. 2021)
};

void ReluInPlace(float* x, int64_t n);
void GeluErfInPlace(float* x, int64_t n);   // x/2 (1 + erf(x / √2))
void GeluTanhInPlace(float* x, int64_t n);  // x/2 (1 + tanh(√(2/π) (x + 0.044715 x³)))
void SiluInPlace(float* x, int64_t n);      // x · sigmoid(x) = x / (1 + e^-x)
void EluPlusOneInPlace(float* x, int64_t n);
void ExpInPlace(float* x, int64_t n);
void ApplyFeatureMap(FeatureMap map, float* x, int64_t n);
void ActivateInPlace(Activation activation, float* x, int64_t n);

}  // namespace attnserve
