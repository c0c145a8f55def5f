#include "engine/importers/weight_reader.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/matmul.h"
#include "engine/weight_grid.h"

namespace attnserve {
namespace {

// A NaN or infinity in a weight would reach every answer as NaN: an error naming the file, the
// tensor and the element, for `values` (count of them) starting at element `offset` of `total`.
absl::Status CheckFinite(const std::string& path, const std::string& name, const float* values,
                         int64_t count, int64_t offset, int64_t total) {
  const int64_t bad = FirstNonFinite(values, count);
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' holds ",
                                                 std::isnan(values[bad]) ? "NaN" : "infinity",
                                                 " at element ", offset + bad, " of ", total));
}

// Rows of a table read at a time (QuantizeSlices' default).
constexpr int64_t kSliceRows = 4096;

}  // namespace

WeightReader::WeightReader(SafetensorsFile file) : path_(file.path()), file_(std::move(file)) {}

WeightReader::WeightReader(std::string path, std::map<std::string, Tensor> tensors)
    : path_(std::move(path)), tensors_(std::move(tensors)) {}

WeightReader::WeightReader(std::string path, std::map<std::string, LazyTensor> tensors)
    : path_(std::move(path)), lazy_tensors_(std::move(tensors)) {}

absl::StatusOr<Tensor> WeightReader::Take(const std::string& name, const Shape& shape) {
  const auto lazy = lazy_tensors_.find(name);
  const bool present =
      file_ ? file_->contains(name) : tensors_.count(name) > 0 || lazy != lazy_tensors_.end();
  if (!present) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": missing tensor '", name, "' of shape ", ShapeToString(shape)));
  }
  auto wrong_shape = [&](const Shape& actual) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", name, "' has shape ",
                                                   ShapeToString(actual), ", the config implies ",
                                                   ShapeToString(shape)));
  };
  // A lazy tensor's shape is checked before it is made.
  if (lazy != lazy_tensors_.end() && lazy->second.shape != shape) {
    return wrong_shape(lazy->second.shape);
  }
  ASSIGN_OR_RETURN(Tensor tensor, file_ ? file_->Float32(name)
                                  : lazy != lazy_tensors_.end()
                                      ? lazy->second.make()
                                      : absl::StatusOr<Tensor>(tensors_.at(name)));
  if (tensor.shape() != shape) return wrong_shape(tensor.shape());
  RETURN_IF_ERROR(CheckFinite(path_, name, tensor.data(), tensor.size(), 0, tensor.size()));
  if (format_.grids != nullptr) {
    ASSIGN_OR_RETURN(std::optional<WeightGrid> grid, GridOf(name));
    format_.grids->Set(tensor.data(), std::move(grid));
  }
  taken_.insert(name);
  return tensor;
}

absl::StatusOr<Tensor> WeightReader::TakeIf(bool present, const std::string& name,
                                            const Shape& shape) {
  if (present) return Take(name, shape);
  return Tensor();  // an unexpected tensor of this name is caught by CheckAllTaken
}

absl::StatusOr<LinearWeights> WeightReader::TakeLinear(const std::string& prefix, int64_t out,
                                                       int64_t in, bool bias) {
  ASSIGN_OR_RETURN(Tensor weight, Take(prefix + ".weight", {out, in}));
  ASSIGN_OR_RETURN(Tensor bias_tensor, TakeIf(bias, prefix + ".bias", {out}));
  return PrepareLinear(std::move(weight), std::move(bias_tensor), format_);
}

absl::StatusOr<std::optional<WeightGrid>> WeightReader::GridOf(const std::string& name) const {
  const auto lazy = lazy_tensors_.find(name);
  if (lazy == lazy_tensors_.end() || lazy->second.shape.size() != 2) return std::nullopt;
  if (!lazy->second.grid) {
    WeightGrid none;
    none.bits = 0;
    none.type = lazy->second.type;
    return none;
  }
  ASSIGN_OR_RETURN(WeightGrid grid, lazy->second.grid());
  grid.type = lazy->second.type;
  return grid;
}

absl::StatusOr<QuantizedWeight> WeightReader::TakeQuantized(const std::string& name,
                                                            const Shape& shape,
                                                            const WeightFormat& format) {
  const auto lazy = lazy_tensors_.find(name);
  if (lazy == lazy_tensors_.end() || !lazy->second.rows || lazy->second.shape != shape ||
      shape.size() != 2) {
    ASSIGN_OR_RETURN(const Tensor tensor, Take(name, shape));
    return PrepareLinear(tensor, Tensor(), format).quantized;
  }
  const auto slice = [&](int64_t first, int64_t count) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor rows, lazy->second.rows(first, count));
    if (rows.shape() != Shape{count, shape[1]}) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", name, "': rows ", first,
                                                     "+", count, " have shape ",
                                                     ShapeToString(rows.shape())));
    }
    RETURN_IF_ERROR(
        CheckFinite(path_, name, rows.data(), rows.size(), first * shape[1], shape[0] * shape[1]));
    return rows;
  };
  // A table the file stores on a grid is kept on it, read a slice at a time as below.
  std::optional<WeightGrid> grid;
  if (format.grids != nullptr) {
    ASSIGN_OR_RETURN(grid, GridOf(name));
  }
  if (grid.has_value() && grid->bits != 0) {
    absl::StatusOr<QuantizedWeight> kept =
        QuantizedWeight::OnGrid(*grid, shape[0], shape[1], format.int8_activations, slice);
    if (kept.ok()) {
      ++format.grids->report().exact;
      taken_.insert(name);
      return kept;
    }
  }
  ASSIGN_OR_RETURN(QuantizedWeight weight,
                   QuantizedWeight::QuantizeSlices(shape[0], shape[1], format, slice));
  if (grid.has_value()) {
    GridReport& report = format.grids->report();
    ++report.requantized[grid->type];
    // The difference it made, measured a slice at a time.
    QuantizedWeight::Deviation deviation;
    for (int64_t first = 0; first < shape[0]; first += kSliceRows) {
      ASSIGN_OR_RETURN(const Tensor rows, slice(first, std::min(kSliceRows, shape[0] - first)));
      const QuantizedWeight::Deviation part = weight.DeviationFrom(rows, first);
      deviation.difference = std::max(deviation.difference, part.difference);
      deviation.magnitude = std::max(deviation.magnitude, part.magnitude);
    }
    report.AddError(deviation.difference, deviation.magnitude);
  }
  taken_.insert(name);
  return weight;
}

absl::Status WeightReader::CheckAllTaken() const {
  std::vector<std::string> names = file_ ? file_->names() : std::vector<std::string>();
  for (const auto& [name, tensor] : tensors_) names.push_back(name);
  for (const auto& [name, tensor] : lazy_tensors_) names.push_back(name);
  for (const std::string& name : names) {
    if (!taken_.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": unexpected tensor '", name, "' (not used by the config)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve
