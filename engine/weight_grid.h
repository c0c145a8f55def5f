// The grid a block-quantized file (GGUF) stores a matrix on, so that the load keeps the file's
// own values instead of quantizing their dequantized floats again: element (n, i) of the matrix
// is level · scale + minimum of its group (group_size inputs of row n), with
//   bits 4: levels 0-15, groups of 32 (QuantizedWeight's int4);
//   bits 8: levels -128 to 127, minimums 0 (QuantizedWeight's int8, any group size);
//   bits 0: no grid the engine keeps (a float matrix, or a type without an exact layout), named
//           by `type` for the report.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "engine/weight_format.h"

namespace attnserve {

struct WeightGrid {
  int bits = 4;
  int64_t group_size = 32;
  Tensor scales;     // [rows, k / group_size]
  Tensor minimums;   // the same shape; empty when bits is 8
  std::string type;  // what the file calls it ("Q4_K"), for the load's report
};

// Grids stacked by rows (a fused projection's parts); empty when their bits or group sizes differ.
std::optional<WeightGrid> StackGrids(const std::vector<const WeightGrid*>& parts);

// What a load kept of a file's grids: the matrices on them, and those quantized again (their
// type has no exact layout, or a fused projection joins parts of different layouts) with the
// largest difference that made, relative to the matrix's largest magnitude.
struct GridReport {
  int exact = 0;
  std::map<std::string, int> requantized;  // by type ("Q5_K", "Q4_K+Q6_K")
  double largest_error = 0.0;
  // A matrix quantized again: the largest difference it made, and its largest magnitude.
  void AddError(double difference, double magnitude) {
    if (magnitude > 0.0) largest_error = std::max(largest_error, difference / magnitude);
  }
  // "210 matrices computed from the file's blocks" or "... 24 quantized again (Q5_K: 24),
  // differing by up to 0.4% of a matrix's largest weight".
  std::string Describe() const;
};

// The grids of the matrices a load has taken, by the address of their float values: the file's
// importer fills it as each weight is read, PrepareLinear finds a weight's grid in it.
class WeightGrids {
 public:
  // A matrix taken without a grid clears what an earlier one at the same address left.
  void Set(const float* values, std::optional<WeightGrid> grid) {
    if (grid.has_value()) {
      grids_.insert_or_assign(values, std::move(*grid));
    } else {
      grids_.erase(values);
    }
  }
  const WeightGrid* Find(const float* values) const {
    const auto it = grids_.find(values);
    return it == grids_.end() ? nullptr : &it->second;
  }
  GridReport& report() { return report_; }

 private:
  std::map<const float*, WeightGrid> grids_;
  GridReport report_;
};

class QuantizedWeight;

// `weight` (the rows of `parts` stacked; `parts` = {&weight} for one matrix) quantized for a load:
// on the grid the file stores every part on, stacked, where format.grids knows one for each and
// they share a layout (what the file holds); else as `format` says, which the report counts, with
// the difference it made, for a file's matrices.
QuantizedWeight QuantizedForLoad(const Tensor& weight, const std::vector<const Tensor*>& parts,
                                 const WeightFormat& format);

// Whether a fused projection is better kept as parts, each quantized for the load on its own: the
// file stores some of them on grids, and the whole on no common one (their layouts differ, or a
// part has none), so that each part on a grid stays exact.
bool KeptAsParts(const std::vector<const Tensor*>& parts, const WeightFormat& format);

}  // namespace attnserve
