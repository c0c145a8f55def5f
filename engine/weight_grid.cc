#include "engine/weight_grid.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/quantized_weight.h"

namespace attnserve {
namespace {

// Tensors [rows_i, width] one under the other.
Tensor StackRows(const std::vector<const Tensor*>& parts) {
  int64_t rows = 0;
  for (const Tensor* part : parts) rows += part->dim(0);
  Tensor out({rows, parts[0]->dim(1)});
  float* to = out.data();
  for (const Tensor* part : parts) {
    std::memcpy(to, part->data(), part->size() * sizeof(float));
    to += part->size();
  }
  return out;
}

}  // namespace

std::optional<WeightGrid> StackGrids(const std::vector<const WeightGrid*>& parts) {
  WeightGrid stacked = *parts[0];
  std::vector<const Tensor*> scales, minimums;
  std::vector<std::string> types;
  for (const WeightGrid* part : parts) {
    if (part->bits != stacked.bits || part->group_size != stacked.group_size ||
        part->scales.dim(1) != stacked.scales.dim(1)) {
      return std::nullopt;
    }
    scales.push_back(&part->scales);
    minimums.push_back(&part->minimums);
    if (std::find(types.begin(), types.end(), part->type) == types.end()) {
      types.push_back(part->type);
    }
  }
  stacked.scales = StackRows(scales);
  if (stacked.bits == 4) stacked.minimums = StackRows(minimums);
  stacked.type = absl::StrJoin(types, "+");
  return stacked;
}

std::string GridReport::Describe() const {
  int again = 0;
  std::vector<std::string> types;
  for (const auto& [type, count] : requantized) {
    again += count;
    types.push_back(absl::StrCat(type, ": ", count));
  }
  std::string out = absl::StrCat(exact, " matrices computed from the file's blocks as stored");
  if (again > 0) {
    absl::StrAppend(
        &out, ", ", again, " quantized again (", absl::StrJoin(types, ", "),
        absl::StrFormat(") within %.2g%% of a matrix's largest weight", 100.0 * largest_error));
  }
  return out;
}

QuantizedWeight QuantizedForLoad(const Tensor& weight, const std::vector<const Tensor*>& parts,
                                 const WeightFormat& format) {
  std::vector<const WeightGrid*> grids;
  std::string types;
  bool on_grids = true;
  for (const Tensor* part : parts) {
    const WeightGrid* grid = format.grids ? format.grids->Find(part->data()) : nullptr;
    if (grid == nullptr) return QuantizedWeight::Quantize(weight, format);  // not a file's
    grids.push_back(grid);
    on_grids = on_grids && grid->bits != 0;
    if (types.find(grid->type) == std::string::npos) {
      types += (types.empty() ? "" : "+") + grid->type;
    }
  }
  GridReport& report = format.grids->report();
  if (const std::optional<WeightGrid> stacked =
          on_grids ? StackGrids(grids) : std::optional<WeightGrid>()) {
    absl::StatusOr<QuantizedWeight> kept =
        QuantizedWeight::OnGrid(weight, *stacked, format.int8_activations);
    if (kept.ok()) {
      ++report.exact;
      return *std::move(kept);
    }
  }
  QuantizedWeight quantized = QuantizedWeight::Quantize(weight, format);
  ++report.requantized[types];
  const QuantizedWeight::Deviation deviation = quantized.DeviationFrom(weight);
  report.AddError(deviation.difference, deviation.magnitude);
  return quantized;
}

bool KeptAsParts(const std::vector<const Tensor*>& parts, const WeightFormat& format) {
  if (format.grids == nullptr) return false;
  std::vector<const WeightGrid*> grids;
  bool any_grid = false, all_grids = true;
  for (const Tensor* part : parts) {
    const WeightGrid* grid = format.grids->Find(part->data());
    if (grid == nullptr) return false;  // not a file's matrix
    grids.push_back(grid);
    any_grid = any_grid || grid->bits != 0;
    all_grids = all_grids && grid->bits != 0;
  }
  return any_grid && (!all_grids || !StackGrids(grids).has_value());
}

}  // namespace attnserve
