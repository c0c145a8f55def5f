// y = x · Wᵀ + bias (then activation) (+ y) for a handful of rows of x: decoding's matmul.
//
// With one to four rows, a matmul only streams W from memory once, so it is bound by memory
// bandwidth. oneDNN 2.6 runs such a matmul on one thread (33 GB/s measured on these machines,
// where two threads read 61 GB/s: bench/kernels_bench BM_LinearOneRowFromMemory against
// bench/machine_peaks), so decoding gets this kernel instead: output columns split across the
// threads, each weight row read once for all rows of x.
#pragma once

#include <cstdint>

#include "engine/kernels/kernel_isa.h"
#include "engine/matmul.h"
#include "engine/packed_weight.h"
#include "engine/quantized_weight.h"
#include "engine/tensor.h"

namespace attnserve {

inline constexpr int64_t kFewRowsMax = 4;
// int8 weights take this kernel for more rows: widening int8 is cheap next to what the prefill
// path costs per call (dequantizing every panel to a bf16 or float tile), so a decoding step of up
// to 16 streams reads each weight from memory once and widens it once per four rows.
inline constexpr int64_t kFewRowsMaxInt8 = 16;
// With int8 activations (AVX512-VNNI, or int4 weights through AVX2's VPMADDUBSW) the kernel also
// beats the dequantized tiles of prefill up to this many rows (docs/benchmarks.md, "Int8
// activations"; on AVX2, SmolLM2 int4's 32-token prompt took 37 ms against the tiles' 43). Where
// the tiles have no AMX, VNNI beats them at every row count (Linear, FewRowsKernelTakes).
inline constexpr int64_t kFewRowsMaxInt8Activations = 32;

// Whether FewRowsLinear multiplies this weight by int8 activations on `isa`: int4 weights always;
// int8 ones where the CPU has VNNI, the weight was quantized for them, and its depth and groups
// are whole blocks of kInt8ActivationBlock.
bool UsesInt8Activations(const QuantizedWeight& weight, KernelIsa isa = BestKernelIsa());
// The most rows FewRowsLinear takes for this weight (Linear sends more through the tiles).
int64_t FewRowsMax(const QuantizedWeight& weight, KernelIsa isa = BestKernelIsa());

// Same contract as Linear() (shapes already checked), for 1 <= x.dim(0) <= kFewRowsMax.
void FewRowsLinear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y,
                   MatmulEpilogue epilogue);
// The same from packed weights: each thread streams whole panels front to back, and a panel row
// gives 64 output columns at once, so no horizontal sums are needed.
void FewRowsLinear(const Tensor& x, const PackedWeight& weight, const Tensor& bias, Tensor& y,
                   MatmulEpilogue epilogue);
// The same from int8 or int4 weights: each thread streams whole panels, a quarter (an eighth) of
// the bytes of float weights, and multiplies them by float activations, or by int8 ones where
// UsesInt8Activations (engine/kernels/int8_panel_products.h, int4_panel_products.h); up to
// FewRowsMax(weight, isa) rows, or any number with int8 activations (a work item is a panel and
// up to 64 rows).
void FewRowsLinear(const Tensor& x, const QuantizedWeight& weight, const Tensor& bias, Tensor& y,
                   MatmulEpilogue epilogue, KernelIsa isa = BestKernelIsa());

}  // namespace attnserve
