// Hands out the tensors of a model.safetensors by name, checking each one's dtype and shape
// against what the config implies, and remembering which were taken so that tensors nobody
// asked for are reported as unexpected. The tensors may also come prepared under the engine's
// names (a Hugging Face checkpoint's, renamed and converted by its importer).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "engine/matmul.h"
#include "engine/safetensors.h"

namespace attnserve {

// A tensor made when it is taken (a GGUF file's, dequantized): loading then holds one source
// tensor in float32 at a time, not the whole model.
struct LazyTensor {
  Shape shape;
  std::function<absl::StatusOr<Tensor>()> make;
  // Rows [first, first + count) of a matrix without the rest, where the source can (empty if not).
  QuantizedWeight::RowSlices rows;
  // The grid a block-quantized file stores the matrix on (engine/weight_grid.h), where its type
  // has one (empty if not); `type` names what the file holds, for the load's report.
  std::function<absl::StatusOr<WeightGrid>()> grid = {};
  std::string type = {};
};

class WeightReader {
 public:
  explicit WeightReader(SafetensorsFile file);
  // `path` names where the tensors came from, in errors.
  WeightReader(std::string path, std::map<std::string, Tensor> tensors);
  WeightReader(std::string path, std::map<std::string, LazyTensor> tensors);

  // The tensor `name` with exactly `shape`; errors name the file and the tensor.
  absl::StatusOr<Tensor> Take(const std::string& name, const Shape& shape);
  // Present exactly when `present`: biases follow the config's `bias` setting.
  absl::StatusOr<Tensor> TakeIf(bool present, const std::string& name, const Shape& shape);

  // `<prefix>.weight` [out, in] and, when `bias`, `<prefix>.bias` [out], prepared in format()
  // (PrepareLinear).
  absl::StatusOr<LinearWeights> TakeLinear(const std::string& prefix, int64_t out, int64_t in,
                                           bool bias);
  // The matrix `name` quantized in `format` (format.quantized assumed), read a slice of rows at a
  // time where the source allows: a large table never is whole in float32.
  absl::StatusOr<QuantizedWeight> TakeQuantized(const std::string& name, const Shape& shape,
                                                const WeightFormat& format);

  // How the model keeps its linear layers' weights (and token embeddings, when int8).
  const WeightFormat& format() const { return format_; }
  void set_format(const WeightFormat& format) { format_ = format; }

  // An error naming the first tensor in the file that no Take* asked for.
  absl::Status CheckAllTaken() const;

  const std::string& path() const { return path_; }

 private:
  // A lazy matrix's grid (bits 0 when its type has none: a float matrix, or a type no layout
  // represents exactly); nothing for another tensor.
  absl::StatusOr<std::optional<WeightGrid>> GridOf(const std::string& name) const;

  std::string path_;
  std::optional<SafetensorsFile> file_;
  std::map<std::string, Tensor> tensors_;  // without a file
  std::map<std::string, LazyTensor> lazy_tensors_;
  std::set<std::string> taken_;
  WeightFormat format_;
};

}  // namespace attnserve
