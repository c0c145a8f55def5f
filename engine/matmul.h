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
#include "engine/bf16_weight.h"
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
// this CPU (PackedWeight::PackIfFaster; empty where plain weights are as fast), quantized, or in
// bfloat16. A packed, quantized or bfloat16 linear holds no plain weight: that copy is the only
// one kept.
struct LinearWeights {
  Tensor weight, bias;
  PackedWeight packed;
  QuantizedWeight quantized;
  Bf16Weight bf16 = {};
  // Or parts stacked by rows, each in a layout of its own, the fields above empty: a fused
  // projection whose parts a file stores on different grids (Q4_K queries and keys, Q6_K values:
  // PrepareStackedLinear under --weights=auto).
  std::vector<LinearWeights> parts = {};

  bool empty() const {
    return weight.empty() && packed.empty() && quantized.empty() && bf16.empty() && parts.empty();
  }
  int64_t out_features() const;
  int64_t in_features() const;
  // The plain weight [out, in]: a copy unpacked or dequantized when that is all there is.
  Tensor PlainWeight() const;
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

// Int8 weights multiply more than kFewRowsMaxInt8 rows through tiles of about this many bytes (at
// least one panel of 64 columns), each dequantized and multiplied by the thread that took it into a
// buffer the thread keeps, so that the matmul reads it from the core's cache: whole-layer tiles
// (16 MB) went through memory three times (written, read back) and ran up to 1.5x slower on a
// shared machine whose memory was busy.
inline constexpr int64_t kDequantizedTileBytes = 1 << 20;

// How int8 weights multiply many rows: dequantized into tiles that oneDNN reads as
//   kFloatKMajor: float32 Wᵀ, K-major (AVX2 CPUs, where oneDNN's plain-layout kernel is fastest);
//   kFloatPacked: float32 in PackedWeight's layout (AVX-512, brgemm);
//   kBf16Packed:  bfloat16 in oneDNN's BA16a64b2a, x rounded to bf16 too, products summed in
//                 float32 (with AMX: twice float32's speed; accuracy in docs/benchmarks.md).
enum class Int8TileFormat { kFloatKMajor, kFloatPacked, kBf16Packed };
// Whether Linear multiplies m rows by q in FewRowsLinear (else through tiles): up to FewRowsMax
// rows, and any number where q takes int8 activations through VNNI and the tiles are not bf16
// (no AMX, or ATTNSERVE_BF16=0).
bool FewRowsKernelTakes(const QuantizedWeight& q, int64_t m);
// The fastest this CPU has. ATTNSERVE_BF16=0 or ATTNSERVE_MAX_ISA=avx2 in the environment rule
// bf16 out, ATTNSERVE_PACK_WEIGHTS=0 packing.
Int8TileFormat BestInt8TileFormat();
// Whether --weights=bf16 multiplies through AMX here: where the int8 path's tiles are bf16 (else
// the rounded weights take the float32 path).
inline bool Bf16WeightsTakeAmx() { return BestInt8TileFormat() == Int8TileFormat::kBf16Packed; }
const char* Int8TileFormatName(Int8TileFormat format);
// y = x · Wᵀ (+ bias) for int8 W through tiles in `format` (Linear takes BestInt8TileFormat() for
// more than kFewRowsMaxInt8 rows); x, y as for Linear.
void QuantizedMatmul(const Tensor& x, const QuantizedWeight& q, const Tensor& bias, Tensor& y,
                     MatmulEpilogue epilogue, Int8TileFormat format);

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
