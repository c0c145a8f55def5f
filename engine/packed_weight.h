// A Linear weight copied, once at load, into the blocked layout that oneDNN's AVX-512 matmul
// kernels (brgemm) read: panels of 64 output columns, panel j holding columns [64j, 64j + 64) of
// Wᵀ as a row-major [K', 64] block, K' = K rounded up to 16, zero-padded (oneDNN's BA16a64b).
//
// Why: on AVX-512 machines oneDNN 2.6 runs a matmul whose row count is a runtime dimension on
// gemm:jit at 28-156 GFLOP/s for 32-128 rows, and a fixed-row-count matmul on packed weights on
// brgemm at 205-230 GFLOP/s for any row count from 5 up (2 threads, K, N in {768, 2304, 3072}).
// On AVX2-only machines the packed layout has no fast kernel and plain weights already run at
// ~200 GFLOP/s, so nothing is packed there. Decoding reads the same panels (FewRowsLinear): one
// copy of the weights serves both.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/tensor.h"

namespace attnserve {

class PackedWeight {
 public:
  static constexpr int64_t kPanelWidth = 64;  // output columns per panel
  static constexpr int64_t kDepthBlock = 16;  // K is padded to a multiple of this

  PackedWeight() = default;
  // The packed copy of weight [N, K] (rows may be strided).
  static PackedWeight Pack(const Tensor& weight);
  // K rounded up to kDepthBlock: the rows of every panel.
  static int64_t PaddedDepth(int64_t k) {
    return (k + kDepthBlock - 1) / kDepthBlock * kDepthBlock;
  }
  // The plain weight [n, k] again, as a new tensor.
  Tensor Unpack() const;
  // Pack(weight) when WorthPacking(weight's shape), else an empty PackedWeight.
  static PackedWeight PackIfFaster(const Tensor& weight);
  // Whether this CPU's oneDNN multiplies faster from packed weights (see above).
  // ATTNSERVE_PACK_WEIGHTS=0 in the environment turns packing off.
  static bool PackingIsFaster();
  // PackingIsFaster() and the weight [n, k] holds at least 1 MB. Below that either kernel takes
  // microseconds, and a small model's weights stay in its mapped file, where the server's page
  // warmer keeps their translations cached (docs/serving.md).
  static bool WorthPacking(int64_t n, int64_t k);

  bool empty() const { return storage_ == nullptr; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t padded_k() const { return padded_k_; }
  int64_t panels() const { return (n_ + kPanelWidth - 1) / kPanelWidth; }
  const float* data() const { return storage_.get(); }
  // Row r of panel j: Wᵀ[r, 64j .. 64j + 63].
  const float* panel(int64_t j) const { return storage_.get() + j * padded_k_ * kPanelWidth; }

 private:
  std::shared_ptr<float> storage_;
  int64_t n_ = 0, k_ = 0, padded_k_ = 0;
};

}  // namespace attnserve
