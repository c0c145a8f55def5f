// y = x · Wᵀ (+ bias) (then activation) (+ y), on oneDNN's matmul.
//
// W is stored as PyTorch's nn.Linear stores it: [out_features, in_features], optionally with a
// packed copy (PackedWeight) that the matmul then reads instead. On plain weights the row count of
// x is a runtime dimension, so one primitive serves every batch size; on packed weights the rows
// go through primitives of fixed row counts 512, 256, ..., 8 and one for the last 1-7 rows. Either
// way primitives are created once per (shape, strides, epilogue[, rows]) and cached for the life
// of the process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kernels/activations.h"
#include "engine/packed_weight.h"
#include "engine/quantized_weight.h"
#include "engine/tensor.h"
#include "engine/weight_format.h"

namespace attnserve {

struct MatmulEpilogue {
  bool accumulate = false;  // y += result (a residual add), fused as oneDNN's sum post-op
  Activation activation = Activation::kNone;  // applied before the accumulation
};

// An nn.Linear: weight [out, in], bias [out] (empty without bias), and the weight packed for
// this CPU (PackedWeight::PackIfFaster; empty where plain weights are as fast) or quantized.
// A packed or quantized linear holds no plain weight: that copy is the only one kept.
struct LinearWeights {
  Tensor weight, bias;
  PackedWeight packed;
  QuantizedWeight quantized;

  bool empty() const { return weight.empty() && packed.empty() && quantized.empty(); }
  int64_t out_features() const {
    return !quantized.empty() ? quantized.n() : packed.empty() ? weight.dim(0) : packed.n();
  }
  int64_t in_features() const {
    return !quantized.empty() ? quantized.k() : packed.empty() ? weight.dim(1) : packed.k();
  }
  // The plain weight [out, in]: a copy unpacked or dequantized when that is all there is.
  Tensor PlainWeight() const {
    return !quantized.empty() ? quantized.Dequantize() : packed.empty() ? weight : packed.Unpack();
  }
};

// The weight in `format`: quantized, or packed where that is faster, and then dropped: its
// memory (a view of the model file) is released once nothing else holds it.
LinearWeights PrepareLinear(Tensor weight, Tensor bias, const WeightFormat& format = {});
// Linear layers that share an input as one: their weights stacked by rows (a view when they lie
// back to back in the model file, as the exporter writes them, else a copy), their biases
// likewise, zero where a part has none (none when no part has one).
LinearWeights PrepareStackedLinear(const std::vector<const Tensor*>& weights,
                                   const std::vector<const Tensor*>& biases,
                                   const WeightFormat& format = {});

// Int8 weights multiply more than kFewRowsMax rows through float tiles of up to this many bytes
// (at least one panel of 64 columns), dequantized into a buffer each calling thread keeps. 16 MB
// holds the largest layer of GPT-2-small and SmolLM whole, so their matmuls run on the whole
// width, as from float weights (smaller tiles measured slower: more, narrower oneDNN calls and a
// copy through a dense buffer for each strided output).
inline constexpr int64_t kDequantizedTileBytes = 16 << 20;

// x: [M, K] with unit inner stride (rows may be strided); weight: [N, K] likewise; bias: empty or
// [N]; y: [M, N] with unit inner stride, allocated by the caller.
absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y,
                    MatmulEpilogue epilogue = {});

absl::Status Linear(const Tensor& x, const LinearWeights& linear, Tensor& y,
                    MatmulEpilogue epilogue = {});

// Linear over the last axis of x: [..., K] -> a new [..., N] tensor.
absl::StatusOr<Tensor> LinearRows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  MatmulEpilogue epilogue = {});
absl::StatusOr<Tensor> LinearRows(const Tensor& x, const LinearWeights& linear,
                                  MatmulEpilogue epilogue = {});

// The implementation oneDNN chose for every matmul primitive created so far, e.g. "gemm:jit".
struct PrimitiveInfo {
  std::string key;
  std::string implementation;
};
std::vector<PrimitiveInfo> CreatedMatmulPrimitives();

}  // namespace attnserve
