#include "engine/packed_weight.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <string>

#include "engine/dnnl_context.h"
#include "engine/parallel.h"
#include "engine/weight_memory.h"

namespace attnserve {
namespace {

// BA16a64b with brgemm means packing pays (AVX-512); plain weights mean it does not (AVX2).
bool PackingIsFasterUncached() {
  const char* setting = std::getenv("ATTNSERVE_PACK_WEIGHTS");
  if (setting != nullptr && std::string(setting) == "0") return false;
  return MatmulPicksPackedBrgemm(dnnl::memory::data_type::f32, dnnl::memory::format_tag::BA16a64b);
}

}  // namespace

bool PackedWeight::PackingIsFaster() {
  static const bool faster = PackingIsFasterUncached();
  return faster;
}

PackedWeight PackedWeight::Pack(const Tensor& weight) {
  PackedWeight packed;
  packed.n_ = weight.dim(0);
  packed.k_ = weight.dim(1);
  packed.padded_k_ = PaddedDepth(packed.k_);
  const size_t floats = static_cast<size_t>(packed.panels() * packed.padded_k_ * kPanelWidth);
  packed.storage_ = AllocateWeights<float>(floats);
  float* data = packed.storage_.get();
  ParallelFor(packed.panels(), [&](int64_t j) {
    float* panel = data + j * packed.padded_k_ * kPanelWidth;
    std::memset(panel, 0, packed.padded_k_ * kPanelWidth * sizeof(float));
    const int64_t columns = std::min(kPanelWidth, packed.n_ - j * kPanelWidth);
    for (int64_t c = 0; c < columns; ++c) {
      const float* row = weight.row(j * kPanelWidth + c);
      for (int64_t r = 0; r < packed.k_; ++r) panel[r * kPanelWidth + c] = row[r];
    }
  });
  return packed;
}

Tensor PackedWeight::Unpack() const {
  Tensor weight({n_, k_});
  for (int64_t j = 0; j < panels(); ++j) {
    const int64_t columns = std::min(kPanelWidth, n_ - j * kPanelWidth);
    for (int64_t c = 0; c < columns; ++c) {
      float* row = weight.row(j * kPanelWidth + c);
      for (int64_t r = 0; r < k_; ++r) row[r] = panel(j)[r * kPanelWidth + c];
    }
  }
  return weight;
}

bool PackedWeight::WorthPacking(int64_t n, int64_t k) {
  constexpr int64_t kMinFloats = 1 << 18;
  return n * k >= kMinFloats && PackingIsFaster();
}

PackedWeight PackedWeight::PackIfFaster(const Tensor& weight) {
  return WorthPacking(weight.dim(0), weight.dim(1)) ? Pack(weight) : PackedWeight();
}

}  // namespace attnserve
