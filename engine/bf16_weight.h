// A Linear weight rounded to bfloat16 once at load (--weights=bf16) and kept in the blocked layout
// oneDNN's AMX matmul kernels read: panels of 64 output columns, each [K', 64] with K' = K rounded
// up to 32 and pairs of rows interleaved (oneDNN's BA16a64b2a, the layout of the int8 path's bf16
// tiles). Half float32's bytes, and no conversion at each matmul: x is rounded to bfloat16 there,
// products are summed in float32.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/tensor.h"

namespace attnserve {

class Bf16Weight {
 public:
  static constexpr int64_t kPanelWidth = 64;  // output columns per panel
  static constexpr int64_t kDepthBlock = 32;  // K is padded to a multiple of this

  Bf16Weight() = default;
  // The bfloat16 copy of weight [N, K] (rows may be strided), each value rounded to nearest even.
  static Bf16Weight Pack(const Tensor& weight);
  static int64_t PaddedDepth(int64_t k) {
    return (k + kDepthBlock - 1) / kDepthBlock * kDepthBlock;
  }
  // The weight [n, k] in float32 again (the rounded values), as a new tensor.
  Tensor Unpack() const;

  bool empty() const { return storage_ == nullptr; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t padded_k() const { return PaddedDepth(k_); }
  int64_t panels() const { return (n_ + kPanelWidth - 1) / kPanelWidth; }
  const uint16_t* data() const { return storage_.get(); }

 private:
  // Where element (column c, depth r) of the weight lies in storage_.
  int64_t Offset(int64_t c, int64_t r) const {
    return c / kPanelWidth * padded_k() * kPanelWidth + r / 2 * 2 * kPanelWidth +
           c % kPanelWidth * 2 + r % 2;
  }

  std::shared_ptr<uint16_t> storage_;
  int64_t n_ = 0, k_ = 0;
};

// A float32 copy of weight [N, K] with every value rounded to bfloat16: what --weights=bf16 keeps
// where the CPU has no fast bfloat16 matmul (the same weights, multiplied in float32).
Tensor RoundedToBf16(const Tensor& weight);

}  // namespace attnserve
