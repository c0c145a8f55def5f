// A float32 tensor: shape, strides (in elements), 64-byte aligned storage shared between views.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace attnserve {

using Shape = std::vector<int64_t>;

class Tensor {
 public:
  static constexpr size_t kAlignment = 64;

  Tensor() = default;
  // Allocates uninitialized storage for `shape`, contiguous (row-major).
  explicit Tensor(Shape shape);
  static Tensor Zeros(Shape shape);
  // A tensor over memory someone else owns; `owner` keeps it alive (for example a mapped file).
  static Tensor Wrap(float* data, Shape shape, std::shared_ptr<const void> owner);

  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  // Dimension `i`; negative counts from the end.
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t stride(int i) const { return strides_[i < 0 ? i + rank() : i]; }
  int64_t size() const;
  bool empty() const { return data_ == nullptr; }
  bool is_contiguous() const;

  float* data() { return data_; }
  const float* data() const { return data_; }
  float* row(int64_t i) { return data_ + i * strides_[0]; }
  const float* row(int64_t i) const { return data_ + i * strides_[0]; }

  // Views sharing storage, never copying.
  Tensor Slice(int axis, int64_t start, int64_t length) const;
  Tensor Reshape(Shape shape) const;   // requires a contiguous tensor
  Tensor Select(int64_t index) const;  // drops the first axis
  // [d0, ..., dn] as [d0·…·dn-1, dn]: a view when the leading axes nest evenly, else a copy.
  Tensor FlattenRows() const;

  // The parts stacked along the first axis as one view, when they lie back to back in memory
  // (tensors of one file, as an exporter can arrange them); empty otherwise. The view keeps
  // every part's storage alive.
  static Tensor StackedView(const std::vector<const Tensor*>& parts);

  Tensor Clone() const;  // a contiguous copy
  void Fill(float value);
  std::string ShapeString() const;

 private:
  std::shared_ptr<const void> storage_;
  float* data_ = nullptr;
  Shape shape_;
  Shape strides_;
};

std::string ShapeToString(const Shape& shape);
Shape ContiguousStrides(const Shape& shape);

// The index of the first NaN or infinity among `count` values, or -1.
int64_t FirstNonFinite(const float* values, int64_t count);

// Bytes of tensor storage allocated and not yet freed, process-wide, and the most there has been
// since the last reset: what a forward pass's activations really take (tests hold the admission
// estimate of engine/architectures/activation_memory.h against it).
int64_t TensorBytesInUse();
int64_t TensorPeakBytes();
void ResetTensorPeakBytes();
// Tensor allocations so far, process-wide: unchanged over an interval, the engine was idle.
int64_t TensorAllocations();

// While one lives (a model loading), blocks of 1 MB or more come from mappings of their own and
// go back to the system when freed. A load reads each weight as a float tensor and frees it once
// quantized or packed; kept in the heap (as activations are, engine/tensor.cc), those blocks were
// not reused: smaller allocations took parts of the freed holes, and SmolLM2's int4 load peaked at
// 178 to 291 MiB, depending on the order they came in, for 118 MiB resident after it.
class MappedLargeBlocks {
 public:
  MappedLargeBlocks();
  ~MappedLargeBlocks();
  MappedLargeBlocks(const MappedLargeBlocks&) = delete;
  MappedLargeBlocks& operator=(const MappedLargeBlocks&) = delete;
};

}  // namespace attnserve
