#include "engine/quantized_weight.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/status_macros.h"
#include "engine/bf16.h"
#include "engine/kernels/int4_panel_products.h"
#include "engine/parallel.h"
#include "engine/weight_memory.h"

namespace attnserve {

QuantizedWeight QuantizedWeight::Allocate(int64_t n, int64_t k, int bits, int64_t group_size,
                                          bool int8_activations) {
  QuantizedWeight q;
  q.bits_ = bits;
  q.int8_activations_ = int8_activations;
  q.n_ = n;
  q.k_ = k;
  if (bits == 4) {
    q.group_size_ = kInt4Group;
    q.values_ = AllocateWeights<int8_t>(static_cast<size_t>(q.panels() * k * kPanelWidth / 2));
    q.halves_ =
        AllocateWeights<Half>(static_cast<size_t>(q.panels() * q.groups() * 2 * kPanelWidth));
  } else {
    q.group_size_ = group_size > 0 && group_size < k ? group_size : std::max<int64_t>(k, 1);
    q.values_ = AllocateWeights<int8_t>(static_cast<size_t>(q.panels() * k * kPanelWidth));
    q.scales_ = AllocateWeights<float>(static_cast<size_t>(q.panels() * q.groups() * kPanelWidth));
  }
  return q;
}

void QuantizedWeight::QuantizePanelInt8(const float* const* rows, int64_t columns, int64_t j) {
  int8_t* values = values_.get() + j * k_ * kPanelWidth;
  float* scales = scales_.get() + j * groups() * kPanelWidth;
  std::memset(values, 0, k_ * kPanelWidth);
  std::fill(scales, scales + groups() * kPanelWidth, 0.0f);
  for (int64_t c = 0; c < columns; ++c) {
    const float* row = rows[c];
    for (int64_t g = 0; g < groups(); ++g) {
      const int64_t begin = g * group_size_, end = std::min(k_, begin + group_size_);
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
}

void QuantizedWeight::QuantizePanelInt4(const float* const* rows, int64_t columns, int64_t j) {
  uint8_t* levels = const_cast<uint8_t*>(int4_panel(j));
  Half* halves = halves_.get() + j * groups() * 2 * kPanelWidth;
  std::memset(levels, 0, k_ * kPanelWidth / 2);
  std::fill(halves, halves + groups() * 2 * kPanelWidth, Half{});
  for (int64_t c = 0; c < columns; ++c) {
    for (int64_t g = 0; g < groups(); ++g) {
      const float* values = rows[c] + g * kInt4Group;
      const auto [low, high] = std::minmax_element(values, values + kInt4Group);
      const Half minimum = ToF16(*low);
      const Half scale = ToF16((*high - FromF16(minimum)) / 15.0f);
      halves[g * 2 * kPanelWidth + c] = scale;
      halves[g * 2 * kPanelWidth + kPanelWidth + c] = minimum;
      const float step = FromF16(scale), base = FromF16(minimum);
      if (step <= 0.0f) continue;  // one value: every level 0
      // Where level i of column c goes (int4_panel_products.h): vector 4m + s, byte 4c' + d.
      uint8_t* vectors = levels + g * kInt4GroupBytes + c / 16 * 4 * 64 + c % 16 * 4;
      for (int64_t i = 0; i < kInt4Group; ++i) {
        const float level = std::clamp(std::nearbyint((values[i] - base) / step), 0.0f, 15.0f);
        vectors[i / 8 * 64 + i % 4] |= static_cast<uint8_t>(level) << (i % 8 / 4 * 4);
      }
    }
  }
}

void QuantizedWeight::QuantizeRows(const Tensor& rows, int64_t first_panel) {
  const int64_t count = (rows.dim(0) + kPanelWidth - 1) / kPanelWidth;
  ParallelFor(count, [&](int64_t p) {
    const int64_t columns = std::min(kPanelWidth, rows.dim(0) - p * kPanelWidth);
    const float* row_pointers[kPanelWidth];
    for (int64_t c = 0; c < columns; ++c) row_pointers[c] = rows.row(p * kPanelWidth + c);
    if (bits_ == 4) {
      QuantizePanelInt4(row_pointers, columns, first_panel + p);
    } else {
      QuantizePanelInt8(row_pointers, columns, first_panel + p);
    }
  });
}

QuantizedWeight QuantizedWeight::Quantize(const Tensor& weight, int64_t group_size,
                                          bool int8_activations) {
  QuantizedWeight q = Allocate(weight.dim(0), weight.dim(1), 8, group_size, int8_activations);
  q.QuantizeRows(weight, 0);
  return q;
}

QuantizedWeight QuantizedWeight::QuantizeInt4(const Tensor& weight) {
  QuantizedWeight q = Allocate(weight.dim(0), weight.dim(1), 4, kInt4Group, true);
  q.QuantizeRows(weight, 0);
  return q;
}

namespace {

bool TakesInt4(int64_t k, const WeightFormat& format) {
  return format.bits == 4 && k % kInt4Group == 0;
}

}  // namespace

QuantizedWeight QuantizedWeight::Quantize(const Tensor& weight, const WeightFormat& format) {
  if (TakesInt4(weight.dim(1), format)) return QuantizeInt4(weight);
  return Quantize(weight, format.group_size, format.int8_activations);
}

absl::StatusOr<QuantizedWeight> QuantizedWeight::QuantizeSlices(int64_t n, int64_t k,
                                                                const WeightFormat& format,
                                                                const RowSlices& rows,
                                                                int64_t slice_rows) {
  slice_rows = std::max<int64_t>(1, slice_rows / kPanelWidth) * kPanelWidth;
  QuantizedWeight q =
      Allocate(n, k, TakesInt4(k, format) ? 4 : 8, format.group_size, format.int8_activations);
  for (int64_t first = 0; first < n; first += slice_rows) {
    ASSIGN_OR_RETURN(const Tensor slice, rows(first, std::min(slice_rows, n - first)));
    q.QuantizeRows(slice, first / kPanelWidth);
  }
  return q;
}

int64_t QuantizedWeight::bytes() const {
  if (bits_ == 4) {
    return panels() * kPanelWidth * (k_ / 2 + groups() * 2 * static_cast<int64_t>(sizeof(Half)));
  }
  return panels() * kPanelWidth * (k_ + groups() * static_cast<int64_t>(sizeof(float)));
}

int QuantizedWeight::value(int64_t n, int64_t i) const {
  const int64_t j = n / kPanelWidth, c = n % kPanelWidth;
  if (bits_ == 8) return panel(j)[i * kPanelWidth + c];
  const uint8_t byte = int4_panel(j)[i / kInt4Group * kInt4GroupBytes + c / 16 * 4 * 64 +
                                     i % kInt4Group / 8 * 64 + c % 16 * 4 + i % 4];
  return i % 8 < 4 ? byte & 0x0f : byte >> 4;
}

float QuantizedWeight::scale(int64_t n, int64_t i) const {
  const int64_t j = n / kPanelWidth, c = n % kPanelWidth;
  if (bits_ == 8) return panel_scales(j)[i / group_size_ * kPanelWidth + c];
  return FromF16(static_cast<Half>(int4_halves(j)[i / kInt4Group * 2 * kPanelWidth + c]));
}

float QuantizedWeight::minimum(int64_t n, int64_t i) const {
  const int64_t j = n / kPanelWidth, c = n % kPanelWidth;
  if (bits_ == 8) return 0.0f;
  return FromF16(
      static_cast<Half>(int4_halves(j)[i / kInt4Group * 2 * kPanelWidth + kPanelWidth + c]));
}

void QuantizedWeight::DequantizeRow(int64_t n, float* out) const {
  if (bits_ == 4) {
    for (int64_t g = 0; g < groups(); ++g) {
      const float step = scale(n, g * kInt4Group), base = minimum(n, g * kInt4Group);
      for (int64_t i = g * kInt4Group; i < (g + 1) * kInt4Group; ++i) {
        out[i] = static_cast<float>(value(n, i)) * step + base;
      }
    }
    return;
  }
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
  if (bits_ == 4) {
    alignas(64) float rows[kInt4Group][kPanelWidth];
    for (int64_t j = first; j < last; ++j) {
      const int64_t columns = std::min(kPanelWidth, n_ - j * kPanelWidth);
      for (int64_t g = 0; g < groups(); ++g) {
        DequantizeInt4Group(int4_panel(j) + g * kInt4GroupBytes,
                            int4_halves(j) + g * kInt4GroupHalves, rows);
        for (int64_t i = 0; i < kInt4Group; ++i) {
          std::copy(rows[i], rows[i] + columns,
                    out + (g * kInt4Group + i) * row_stride + (j - first) * kPanelWidth);
        }
      }
    }
    return;
  }
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
    for (int64_t g = 0; bits_ == 4 && g < groups(); ++g) {
      DequantizeInt4Group(
          int4_panel(j) + g * kInt4GroupBytes, int4_halves(j) + g * kInt4GroupHalves,
          reinterpret_cast<float(*)[kPanelWidth]>(block + g * kInt4Group * kPanelWidth));
    }
    for (int64_t i = 0; bits_ == 8 && i < k_; ++i) {
      DequantizePanelRow(panel(j) + i * kPanelWidth,
                         panel_scales(j) + i / group_size_ * kPanelWidth, block + i * kPanelWidth,
                         kPanelWidth);
    }
    std::fill(block + k_ * kPanelWidth, block + padded_k * kPanelWidth, 0.0f);
  }
}

void QuantizedWeight::DequantizePanelsBf16(int64_t first, int64_t last, int64_t padded_k,
                                           uint16_t* out) const {
  if (bits_ == 4) {
    for (int64_t j = first; j < last; ++j) {
      uint16_t* block = out + (j - first) * padded_k * kPanelWidth;
      for (int64_t g = 0; g < groups(); ++g) {
        DequantizeInt4GroupBf16(int4_panel(j) + g * kInt4GroupBytes,
                                int4_halves(j) + g * kInt4GroupHalves,
                                block + g * kInt4Group * kPanelWidth);
      }
      std::fill(block + k_ * kPanelWidth, block + padded_k * kPanelWidth, uint16_t{0});
    }
    return;
  }
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
