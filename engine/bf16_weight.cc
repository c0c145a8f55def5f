#include "engine/bf16_weight.h"

#include <algorithm>
#include <cstring>

#include "engine/bf16.h"
#include "engine/parallel.h"
#include "engine/weight_memory.h"

namespace attnserve {

Bf16Weight Bf16Weight::Pack(const Tensor& weight) {
  Bf16Weight packed;
  packed.n_ = weight.dim(0);
  packed.k_ = weight.dim(1);
  const int64_t panel_values = packed.padded_k() * kPanelWidth;
  packed.storage_ = AllocateWeights<uint16_t>(static_cast<size_t>(packed.panels() * panel_values));
  uint16_t* data = packed.storage_.get();
  ParallelFor(packed.panels(), [&](int64_t j) {
    std::memset(data + j * panel_values, 0, panel_values * sizeof(uint16_t));
    const int64_t last = std::min(packed.n_, (j + 1) * kPanelWidth);
    for (int64_t c = j * kPanelWidth; c < last; ++c) {
      const float* row = weight.row(c);
      for (int64_t r = 0; r < packed.k_; ++r) data[packed.Offset(c, r)] = ToBf16(row[r]);
    }
  });
  return packed;
}

Tensor Bf16Weight::Unpack() const {
  Tensor weight({n_, k_});
  for (int64_t c = 0; c < n_; ++c) {
    float* row = weight.row(c);
    for (int64_t r = 0; r < k_; ++r) row[r] = FromBf16(storage_.get()[Offset(c, r)]);
  }
  return weight;
}

Tensor RoundedToBf16(const Tensor& weight) {
  Tensor rounded(weight.shape());
  for (int64_t c = 0; c < weight.dim(0); ++c) {
    const float* in = weight.row(c);
    float* out = rounded.row(c);
    for (int64_t r = 0; r < weight.dim(1); ++r) out[r] = FromBf16(ToBf16(in[r]));
  }
  return rounded;
}

}  // namespace attnserve
