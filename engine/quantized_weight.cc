#include "engine/quantized_weight.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/bf16.h"
#include "engine/parallel.h"
#include "engine/weight_memory.h"

namespace attnserve {

QuantizedWeight QuantizedWeight::Quantize(const Tensor& weight, int64_t group_size,
                                          bool int8_activations) {
  QuantizedWeight q;
  q.int8_activations_ = int8_activations;
  q.n_ = weight.dim(0);
  q.k_ = weight.dim(1);
  q.group_size_ = group_size > 0 && group_size < q.k_ ? group_size : std::max<int64_t>(q.k_, 1);
  q.values_ = AllocateWeights<int8_t>(static_cast<size_t>(q.panels() * q.k_ * kPanelWidth));
  q.scales_ = AllocateWeights<float>(static_cast<size_t>(q.panels() * q.groups() * kPanelWidth));
  ParallelFor(q.panels(), [&](int64_t j) {
    int8_t* values = q.values_.get() + j * q.k_ * kPanelWidth;
    float* scales = q.scales_.get() + j * q.groups() * kPanelWidth;
    std::memset(values, 0, q.k_ * kPanelWidth);
    std::fill(scales, scales + q.groups() * kPanelWidth, 0.0f);
    const int64_t columns = std::min(kPanelWidth, q.n_ - j * kPanelWidth);
    for (int64_t c = 0; c < columns; ++c) {
      const float* row = weight.row(j * kPanelWidth + c);
      for (int64_t g = 0; g < q.groups(); ++g) {
        const int64_t begin = g * q.group_size_, end = std::min(q.k_, begin + q.group_size_);
        float largest = 0.0f;
        for (int64_t i = begin; i < end; ++i) largest = std::max(largest, std::fabs(row[i]));
        if (largest == 0.0f) continue;  // values and scale stay zero
        const float scale = largest / 127.0f;
        scales[g * kPanelWidth + c] = scale;
        for (int64_t i = begin; i < end; ++i) {
          const float level = std::nearbyint(row[i] / scale);
          values[i * kPanelWidth + c] = static_cast<int8_t>(std::clamp(level, -127.0f, 127.0f));
        }
      }
    }
  });
  return q;
}

int64_t QuantizedWeight::bytes() const {
  return panels() * kPanelWidth * (k_ + groups() * static_cast<int64_t>(sizeof(float)));
}

void QuantizedWeight::DequantizeRow(int64_t n, float* out) const {
  const int8_t* values = panel(n / kPanelWidth) + n % kPanelWidth;
  const float* scales = panel_scales(n / kPanelWidth) + n % kPanelWidth;
  for (int64_t i = 0; i < k_; ++i) {
    out[i] = values[i * kPanelWidth] * scales[i / group_size_ * kPanelWidth];
  }
}

Tensor QuantizedWeight::Dequantize() const {
  Tensor weight({n_, k_});
  for (int64_t n = 0; n < n_; ++n) DequantizeRow(n, weight.row(n));
  return weight;
}

namespace {

// out[c] = values[c] · scales[c] for one panel row of 64 columns.
inline void DequantizePanelRow(const int8_t* values, const float* scales, float* out,
                               int64_t columns) {
#pragma omp simd
  for (int64_t c = 0; c < columns; ++c) out[c] = static_cast<float>(values[c]) * scales[c];
}

}  // namespace

void QuantizedWeight::DequantizeColumns(int64_t first, int64_t last, float* out,
                                        int64_t row_stride) const {
  for (int64_t i = 0; i < k_; ++i) {
    for (int64_t j = first; j < last; ++j) {
      DequantizePanelRow(panel(j) + i * kPanelWidth,
                         panel_scales(j) + i / group_size_ * kPanelWidth,
                         out + i * row_stride + (j - first) * kPanelWidth,
                         std::min(kPanelWidth, n_ - j * kPanelWidth));
    }
  }
}

void QuantizedWeight::DequantizePanels(int64_t first, int64_t last, int64_t padded_k,
                                       float* out) const {
  for (int64_t j = first; j < last; ++j) {
    float* block = out + (j - first) * padded_k * kPanelWidth;
    for (int64_t i = 0; i < k_; ++i) {
      DequantizePanelRow(panel(j) + i * kPanelWidth,
                         panel_scales(j) + i / group_size_ * kPanelWidth, block + i * kPanelWidth,
                         kPanelWidth);
    }
    std::fill(block + k_ * kPanelWidth, block + padded_k * kPanelWidth, 0.0f);
  }
}

void QuantizedWeight::DequantizePanelsBf16(int64_t first, int64_t last, int64_t padded_k,
                                           uint16_t* out) const {
  for (int64_t j = first; j < last; ++j) {
    uint16_t* block = out + (j - first) * padded_k * kPanelWidth;
    for (int64_t i = 0; i + 1 < k_; i += 2) {
      const int8_t* even = panel(j) + i * kPanelWidth;
      const int8_t* odd = even + kPanelWidth;
      const float* even_scales = panel_scales(j) + i / group_size_ * kPanelWidth;
      const float* odd_scales = panel_scales(j) + (i + 1) / group_size_ * kPanelWidth;
      uint16_t* pair = block + i * kPanelWidth;
#pragma omp simd
      for (int64_t c = 0; c < kPanelWidth; ++c) {
        pair[2 * c] = ToBf16(static_cast<float>(even[c]) * even_scales[c]);
        pair[2 * c + 1] = ToBf16(static_cast<float>(odd[c]) * odd_scales[c]);
      }
    }
    const int64_t paired = k_ / 2 * 2;
    std::fill(block + paired * kPanelWidth, block + padded_k * kPanelWidth, uint16_t{0});
    if (k_ % 2 != 0) {
      const int8_t* last_row = panel(j) + paired * kPanelWidth;
      const float* scales = panel_scales(j) + paired / group_size_ * kPanelWidth;
      uint16_t* pair = block + paired * kPanelWidth;
      for (int64_t c = 0; c < kPanelWidth; ++c) {
        pair[2 * c] = ToBf16(static_cast<float>(last_row[c]) * scales[c]);
      }
    }
  }
}

}  // namespace attnserve
