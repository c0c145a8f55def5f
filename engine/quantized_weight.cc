#include "engine/quantized_weight.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/bf16.h"
#include "engine/kernels/int4_panel_products.h"
#include "engine/parallel.h"
#include "engine/weight_memory.h"

namespace attnserve {

QuantizedWeight QuantizedWeight::Allocate(int64_t n, int64_t k, int bits, int64_t group_size,
                                          bool int8_activations, bool int4_floats) {
  QuantizedWeight q;
  q.bits_ = bits;
  q.int8_activations_ = int8_activations;
  q.n_ = n;
  q.k_ = k;
  if (bits == 4) {
    q.group_size_ = kInt4Group;
    q.values_ = AllocateWeights<int8_t>(static_cast<size_t>(q.panels() * k * kPanelWidth / 2));
    const auto scales = static_cast<size_t>(q.panels() * q.groups() * 2 * kPanelWidth);
    if (int4_floats) {
      q.scales_ = AllocateWeights<float>(scales);
    } else {
      q.halves_ = AllocateWeights<Half>(scales);
    }
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

namespace {

// Where level i of column c of a group goes (int4_panel_products.h): vector 4m + s, byte 4c' + d.
inline void PutInt4Level(uint8_t* group_levels, int64_t c, int64_t i, uint8_t level) {
  group_levels[c / 16 * 4 * 64 + c % 16 * 4 + i / 8 * 64 + i % 4] |=
      static_cast<uint8_t>(level << (i % 8 / 4 * 4));
}

}  // namespace

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
      for (int64_t i = 0; i < kInt4Group; ++i) {
        const float level = std::clamp(std::nearbyint((values[i] - base) / step), 0.0f, 15.0f);
        PutInt4Level(levels + g * kInt4GroupBytes, c, i, static_cast<uint8_t>(level));
      }
    }
  }
}

bool QuantizedWeight::PanelOnGrid(const float* const* rows, int64_t columns, int64_t j,
                                  const WeightGrid& grid, int64_t first_row) {
  const bool int4 = bits_ == 4;
  const int64_t span = int4 ? 2 * kPanelWidth : kPanelWidth;  // values a panel's group holds
  float* floats = scales_ == nullptr ? nullptr : scales_.get() + j * groups() * span;
  Half* halves = halves_ == nullptr ? nullptr : halves_.get() + j * groups() * span;
  uint8_t* levels = int4 ? const_cast<uint8_t*>(int4_panel(j)) : nullptr;
  int8_t* values = int4 ? nullptr : values_.get() + j * k_ * kPanelWidth;
  if (int4) {
    std::memset(levels, 0, k_ * kPanelWidth / 2);
  } else {
    std::memset(values, 0, k_ * kPanelWidth);
  }
  if (floats != nullptr) std::fill(floats, floats + groups() * span, 0.0f);
  if (halves != nullptr) std::fill(halves, halves + groups() * span, Half{});
  const float lowest = int4 ? 0.0f : -128.0f, highest = int4 ? 15.0f : 127.0f;
  for (int64_t c = 0; c < columns; ++c) {
    const float* row = rows[c];
    for (int64_t g = 0; g < groups(); ++g) {
      const float scale = grid.scales.row(first_row + c)[g];
      const float minimum = int4 ? grid.minimums.row(first_row + c)[g] : 0.0f;
      if (halves != nullptr) {
        halves[g * span + c] = ToF16(scale);
        halves[g * span + kPanelWidth + c] = ToF16(minimum);
      } else {
        floats[g * span + c] = scale;
        if (int4) floats[g * span + kPanelWidth + c] = minimum;
      }
      const int64_t begin = g * group_size_, end = std::min(k_, begin + group_size_);
      for (int64_t i = begin; i < end; ++i) {
        const float level = scale == 0.0f ? 0.0f : std::nearbyint((row[i] - minimum) / scale);
        // The file's value is level · scale + minimum, the product exact (an f16 times at most 13
        // bits): anything else is not on this grid.
        if (!(level >= lowest && level <= highest) || level * scale + minimum != row[i]) {
          return false;
        }
        if (int4) {
          PutInt4Level(levels + g * kInt4GroupBytes, c, i - begin, static_cast<uint8_t>(level));
        } else {
          values[i * kPanelWidth + c] = static_cast<int8_t>(level);
        }
      }
    }
  }
  return true;
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

absl::StatusOr<QuantizedWeight> QuantizedWeight::OnGrid(const WeightGrid& grid, int64_t n,
                                                        int64_t k, bool int8_activations,
                                                        const RowSlices& rows, int64_t slice_rows) {
  const int64_t groups = grid.group_size > 0 ? k / grid.group_size : 0;
  if ((grid.bits != 4 && grid.bits != 8) || (grid.bits == 4 && grid.group_size != kInt4Group) ||
      groups == 0 || k % grid.group_size != 0 || grid.scales.shape() != Shape{n, groups} ||
      (grid.bits == 4 && grid.minimums.shape() != grid.scales.shape())) {
    return absl::InvalidArgumentError(absl::StrCat("a ", grid.type, " grid of ", grid.bits,
                                                   " bits and groups of ", grid.group_size,
                                                   " does not fit a [", n, ", ", k, "] weight"));
  }
  // Int4's scales and minimums stay f16 when f16 holds every one exactly (Q4_0, Q4_1).
  bool f16 = grid.bits == 4;
  for (const Tensor* values : {&grid.scales, &grid.minimums}) {
    for (int64_t i = 0; f16 && i < values->size(); ++i) {
      f16 = FromF16(ToF16(values->data()[i])) == values->data()[i];
    }
  }
  QuantizedWeight q = Allocate(n, k, grid.bits, grid.group_size, int8_activations,
                               /*int4_floats=*/grid.bits == 4 && !f16);
  slice_rows = std::max<int64_t>(1, slice_rows / kPanelWidth) * kPanelWidth;
  for (int64_t first = 0; first < n; first += slice_rows) {
    ASSIGN_OR_RETURN(const Tensor slice, rows(first, std::min(slice_rows, n - first)));
    const int64_t count = (slice.dim(0) + kPanelWidth - 1) / kPanelWidth;
    std::atomic<bool> on_grid = true;
    ParallelFor(count, [&](int64_t p) {
      const int64_t columns = std::min(kPanelWidth, slice.dim(0) - p * kPanelWidth);
      const float* row_pointers[kPanelWidth];
      for (int64_t c = 0; c < columns; ++c) row_pointers[c] = slice.row(p * kPanelWidth + c);
      if (!q.PanelOnGrid(row_pointers, columns, first / kPanelWidth + p, grid,
                         first + p * kPanelWidth)) {
        on_grid = false;
      }
    });
    if (!on_grid) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rows ", first, "+", slice.dim(0), " hold values off their ", grid.type, " grid"));
    }
  }
  return q;
}

absl::StatusOr<QuantizedWeight> QuantizedWeight::OnGrid(const Tensor& weight,
                                                        const WeightGrid& grid,
                                                        bool int8_activations) {
  return OnGrid(grid, weight.dim(0), weight.dim(1), int8_activations,
                [&](int64_t first, int64_t count) -> absl::StatusOr<Tensor> {
                  return weight.Slice(0, first, count);
                });
}

int64_t QuantizedWeight::bytes() const {
  if (bits_ == 4) {
    const int64_t scale_bytes = halves_ != nullptr ? sizeof(Half) : sizeof(float);
    return panels() * kPanelWidth * (k_ / 2 + groups() * 2 * scale_bytes);
  }
  return panels() * kPanelWidth * (k_ + groups() * static_cast<int64_t>(sizeof(float)));
}

namespace {

float Int4ScaleAt(Int4Scales scales, int64_t offset) {
  return scales.halves != nullptr ? FromF16(static_cast<Half>(scales.halves[offset]))
                                  : scales.floats[offset];
}

}  // namespace

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
  return Int4ScaleAt(int4_scales(j), i / kInt4Group * 2 * kPanelWidth + c);
}

float QuantizedWeight::minimum(int64_t n, int64_t i) const {
  const int64_t j = n / kPanelWidth, c = n % kPanelWidth;
  if (bits_ == 8) return 0.0f;
  return Int4ScaleAt(int4_scales(j), i / kInt4Group * 2 * kPanelWidth + kPanelWidth + c);
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

QuantizedWeight::Deviation QuantizedWeight::DeviationFrom(const Tensor& rows, int64_t first) const {
  std::vector<float> row(static_cast<size_t>(k_));
  Deviation out;
  for (int64_t r = 0; r < rows.dim(0); ++r) {
    DequantizeRow(first + r, row.data());
    for (int64_t i = 0; i < k_; ++i) {
      const double value = rows.row(r)[i];
      out.magnitude = std::max(out.magnitude, std::fabs(value));
      out.difference = std::max(out.difference, std::fabs(value - row[i]));
    }
  }
  return out;
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
        DequantizeInt4Group(int4_panel(j) + g * kInt4GroupBytes, int4_scales(j).Group(g), rows);
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
          int4_panel(j) + g * kInt4GroupBytes, int4_scales(j).Group(g),
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
        DequantizeInt4GroupBf16(int4_panel(j) + g * kInt4GroupBytes, int4_scales(j).Group(g),
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
