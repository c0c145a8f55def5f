// A Linear weight [N, K] quantized to int8 at load: symmetric, one float scale per output column
// and group of `group_size` input columns (group_size = K: one scale per output column), laid
// out in panels of 64 output columns as PackedWeight is, so that decoding streams each panel front
// to back and a panel row gives 64 outputs at once:
//
//   values: panel j, row i = W[64j .. 64j + 63, i] quantized (64 bytes, one cache line)
//   scales: panel j, group g = the 64 columns' scales for rows [g·group_size, (g+1)·group_size)
//
// W[n, i] ≈ values · scale, with scale = max |W[n, group]| / 127 (0 for a group of zeros).
// Columns past N in the last panel are zero with zero scales.
//
// Or to int4 (QuantizeInt4): levels 0-15 with an f16 scale and minimum per group of 32 inputs,
// W[n, i] ≈ level · scale + minimum, in the panel layout engine/kernels/int4_panel_products.h
// describes (half a byte per weight and 4 bytes per group: 5 bits a weight).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/f16.h"
#include "engine/kernels/int4_panel_products.h"
#include "engine/tensor.h"
#include "engine/weight_format.h"
#include "engine/weight_grid.h"

namespace attnserve {

class QuantizedWeight {
 public:
  static constexpr int64_t kPanelWidth = 64;

  QuantizedWeight() = default;
  // weight [N, K] (rows may be strided); group_size 0 means K (one scale per output column).
  // int8_activations: whether decoding may multiply it by int8 activations (WeightFormat).
  static QuantizedWeight Quantize(const Tensor& weight, int64_t group_size,
                                  bool int8_activations = true);
  // weight [N, K] with K a multiple of 32, to int4: scale = (max - min) / 15 and minimum = min of
  // each group, both rounded to f16 first, levels rounded to the nearest.
  static QuantizedWeight QuantizeInt4(const Tensor& weight);
  // As `format` says (format.quantized assumed): int4 where it asks for 4 bits and K is a
  // multiple of 32, else int8.
  static QuantizedWeight Quantize(const Tensor& weight, const WeightFormat& format);
  // The same for a weight [n, k] read in slices of about slice_rows rows (whole panels):
  // rows(first, count) gives rows [first, first + count) as a [count, k] tensor, so that a large
  // table (SmolLM2's tokens: 108 MiB in float32) is never whole in float32 while it loads.
  using RowSlices = std::function<absl::StatusOr<Tensor>(int64_t first, int64_t count)>;
  static absl::StatusOr<QuantizedWeight> QuantizeSlices(int64_t n, int64_t k,
                                                        const WeightFormat& format,
                                                        const RowSlices& rows,
                                                        int64_t slice_rows = 4096);

  // The weight on a file's grid (engine/weight_grid.h): each level recovered from the dequantized
  // values that rows(first, count) gives, so that it holds exactly what the file does. Int4 keeps
  // its scales and minimums in f16 where f16 holds them all, else as floats. FAILED_PRECONDITION
  // when a value is not on the grid.
  static absl::StatusOr<QuantizedWeight> OnGrid(const WeightGrid& grid, int64_t n, int64_t k,
                                                bool int8_activations, const RowSlices& rows,
                                                int64_t slice_rows = 4096);
  static absl::StatusOr<QuantizedWeight> OnGrid(const Tensor& weight, const WeightGrid& grid,
                                                bool int8_activations);

  bool empty() const { return values_ == nullptr; }
  int bits() const { return bits_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t group_size() const { return group_size_; }
  bool int8_activations() const { return int8_activations_; }
  int64_t groups() const { return (k_ + group_size_ - 1) / group_size_; }
  int64_t panels() const { return (n_ + kPanelWidth - 1) / kPanelWidth; }
  // Bytes held: the values and the scales (and minimums).
  int64_t bytes() const;

  // Int8: panel j's values [K, 64] and scales [groups, 64].
  const int8_t* panel(int64_t j) const { return values_.get() + j * k_ * kPanelWidth; }
  const float* panel_scales(int64_t j) const { return scales_.get() + j * groups() * kPanelWidth; }
  // Int4: panel j's levels and its groups' f16 scales and minimums (int4_panel_products.h).
  const uint8_t* int4_panel(int64_t j) const {
    return reinterpret_cast<const uint8_t*>(values_.get()) + j * k_ * kPanelWidth / 2;
  }
  Int4Scales int4_scales(int64_t j) const {
    const int64_t offset = j * groups() * 2 * kPanelWidth;
    if (halves_ == nullptr) return {nullptr, scales_.get() + offset};
    return {reinterpret_cast<const uint16_t*>(halves_.get()) + offset, nullptr};
  }
  // W[n, i] ≈ value(n, i) · scale(n, i) + minimum(n, i); value is the stored level (int8: -127 to
  // 127, int4: 0 to 15), minimum 0 for int8.
  int value(int64_t n, int64_t i) const;
  float scale(int64_t n, int64_t i) const;
  float minimum(int64_t n, int64_t i) const;

  // Row n of the dequantized weight (K floats): a token embedding lookup from a tied table.
  void DequantizeRow(int64_t n, float* out) const;
  // Against rows [first, first + rows.dim(0)) of the weight it was made from: the largest
  // difference of an element from its dequantized value, and the largest magnitude among them.
  struct Deviation {
    double difference = 0.0, magnitude = 0.0;
  };
  Deviation DeviationFrom(const Tensor& rows, int64_t first = 0) const;
  // The dequantized weight [N, K], as a new tensor.
  Tensor Dequantize() const;
  // Tiles for a matmul, on the calling thread (QuantizedMatmul hands each thread its own tiles).
  // Panels [first, last) dequantized as Wᵀ[K, columns] rows of `row_stride` floats, columns
  // [64·first, min(N, 64·last)) (the layout a matmul reads as a K-major weight).
  void DequantizeColumns(int64_t first, int64_t last, float* out, int64_t row_stride) const;
  // Panels [first, last) dequantized into PackedWeight's layout (rows padded to `padded_k` with
  // zeros), one [padded_k, 64] block per panel.
  void DequantizePanels(int64_t first, int64_t last, int64_t padded_k, float* out) const;
  // The same in bfloat16, in the layout oneDNN's bf16 matmul reads (BA16a64b2a): each panel a
  // [padded_k / 2, 64, 2] block, rows 2r and 2r + 1 of a column side by side.
  void DequantizePanelsBf16(int64_t first, int64_t last, int64_t padded_k, uint16_t* out) const;

 private:
  // Room for a weight [n, k], its values not yet set.
  // int4_floats: an int4 weight's scales and minimums as floats rather than f16.
  static QuantizedWeight Allocate(int64_t n, int64_t k, int bits, int64_t group_size,
                                  bool int8_activations, bool int4_floats = false);
  // Rows [64 · first_panel, 64 · first_panel + rows.dim(0)) of the weight from `rows`.
  void QuantizeRows(const Tensor& rows, int64_t first_panel);
  // Panel j from its `columns` rows (the rest zero).
  void QuantizePanelInt8(const float* const* rows, int64_t columns, int64_t j);
  void QuantizePanelInt4(const float* const* rows, int64_t columns, int64_t j);
  // Panel j's columns [0, columns) from `rows` on `grid`, whose row first_row is the panel's
  // first: false when a value is off the grid.
  bool PanelOnGrid(const float* const* rows, int64_t columns, int64_t j, const WeightGrid& grid,
                   int64_t first_row);

  std::shared_ptr<int8_t> values_;  // int4: two levels a byte
  std::shared_ptr<float> scales_;   // int8, and int4 with float scales
  std::shared_ptr<Half> halves_;    // int4 with f16 scales
  int64_t n_ = 0, k_ = 0, group_size_ = 0;
  int bits_ = 8;
  bool int8_activations_ = true;
};

}  // namespace attnserve
