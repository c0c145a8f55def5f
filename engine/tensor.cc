#include "engine/tensor.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve {
namespace {

int64_t Product(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// Activations are allocated and freed on every forward pass. With glibc's defaults, large blocks
// come from fresh mmaps and the top of the heap is trimmed back to the system, so every pass
// page-faults and zeroes its working set again: 11% of a GPT-2-small prefill in the kernel
// (perf), 6-10% of its time. Freed memory stays in the process instead (resident memory settles
// at the peak working set); blocks above 32 MB (glibc's largest threshold) are still mapped. The
// server hands free memory back once the engine is idle (server/ops/memory_trimmer.h).
constexpr int kKeptBlockBytes = 32 << 20;

void KeepFreedMemory() {
  static const bool configured = [] {
    mallopt(M_MMAP_THRESHOLD, kKeptBlockBytes);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)configured;
}

std::mutex mapped_scopes_mutex;
int mapped_scopes = 0;

std::atomic<int64_t> tensor_bytes{0}, tensor_peak_bytes{0}, tensor_allocations{0};

void CountAllocated(int64_t bytes) {
  tensor_allocations.fetch_add(1, std::memory_order_relaxed);
  const int64_t now = tensor_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = tensor_peak_bytes.load(std::memory_order_relaxed);
  while (now > peak &&
         !tensor_peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

std::shared_ptr<float> AllocateAligned(int64_t count) {
  KeepFreedMemory();
  size_t bytes = static_cast<size_t>(count) * sizeof(float);
  // aligned_alloc wants a multiple of the alignment.
  bytes = (bytes + Tensor::kAlignment - 1) / Tensor::kAlignment * Tensor::kAlignment;
  if (bytes == 0) bytes = Tensor::kAlignment;
  void* memory = std::aligned_alloc(Tensor::kAlignment, bytes);
  if (memory == nullptr) throw std::bad_alloc();
  CountAllocated(static_cast<int64_t>(bytes));
  return std::shared_ptr<float>(static_cast<float*>(memory), [bytes](float* p) {
    tensor_bytes.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    std::free(p);
  });
}

}  // namespace

MappedLargeBlocks::MappedLargeBlocks() {
  KeepFreedMemory();
  std::lock_guard lock(mapped_scopes_mutex);
  if (mapped_scopes++ == 0) mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

MappedLargeBlocks::~MappedLargeBlocks() {
  std::lock_guard lock(mapped_scopes_mutex);
  if (--mapped_scopes == 0) mallopt(M_MMAP_THRESHOLD, kKeptBlockBytes);
}

int64_t TensorBytesInUse() { return tensor_bytes.load(std::memory_order_relaxed); }
int64_t TensorPeakBytes() { return tensor_peak_bytes.load(std::memory_order_relaxed); }
int64_t TensorAllocations() { return tensor_allocations.load(std::memory_order_relaxed); }
void ResetTensorPeakBytes() {
  tensor_peak_bytes.store(tensor_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

Tensor::Tensor(Shape shape) : shape_(std::move(shape)), strides_(ContiguousStrides(shape_)) {
  std::shared_ptr<float> storage = AllocateAligned(Product(shape_));
  data_ = storage.get();
  storage_ = std::move(storage);
}

Tensor Tensor::Zeros(Shape shape) {
  Tensor tensor(std::move(shape));
  tensor.Fill(0.0f);
  return tensor;
}

Tensor Tensor::Wrap(float* data, Shape shape, std::shared_ptr<const void> owner) {
  Tensor tensor;
  tensor.storage_ = std::move(owner);
  tensor.data_ = data;
  tensor.strides_ = ContiguousStrides(shape);
  tensor.shape_ = std::move(shape);
  return tensor;
}

int64_t Tensor::size() const { return Product(shape_); }

// As strides_ == ContiguousStrides(shape_), without allocating: kernels' checks call it on every
// call of a decoding step.
bool Tensor::is_contiguous() const {
  if (strides_.size() != shape_.size()) return false;
  int64_t stride = 1;
  for (int i = static_cast<int>(shape_.size()) - 1; i >= 0; --i) {
    if (strides_[i] != stride) return false;
    stride *= shape_[i];
  }
  return true;
}

Tensor Tensor::Slice(int axis, int64_t start, int64_t length) const {
  if (axis < 0) axis += rank();
  Tensor view = *this;
  view.data_ = data_ + start * strides_[axis];
  view.shape_[axis] = length;
  return view;
}

Tensor Tensor::Reshape(Shape shape) const {
  Tensor view = *this;
  view.strides_ = ContiguousStrides(shape);
  view.shape_ = std::move(shape);
  return view;
}

Tensor Tensor::Select(int64_t index) const {
  Tensor view = *this;
  view.data_ = data_ + index * strides_[0];
  view.shape_.erase(view.shape_.begin());
  view.strides_.erase(view.strides_.begin());
  return view;
}

Tensor Tensor::StackedView(const std::vector<const Tensor*>& parts) {
  if (parts.empty()) return Tensor();
  const Tensor& first = *parts[0];
  int64_t rows = 0;
  const float* next = first.data_;
  for (const Tensor* part : parts) {
    if (part->empty() || !part->is_contiguous() || part->data_ != next ||
        part->rank() != first.rank() ||
        !std::equal(part->shape_.begin() + 1, part->shape_.end(), first.shape_.begin() + 1)) {
      return Tensor();
    }
    rows += part->shape_[0];
    next = part->data_ + part->size();
  }
  Tensor view = first;
  view.shape_[0] = rows;
  if (parts.size() > 1) {  // the parts may have owners of their own: the view keeps them all
    auto owners = std::make_shared<std::vector<std::shared_ptr<const void>>>();
    for (const Tensor* part : parts) owners->push_back(part->storage_);
    view.storage_ = std::move(owners);
  }
  return view;
}

Tensor Tensor::FlattenRows() const {
  for (int axis = 0; axis + 2 < rank(); ++axis) {
    if (strides_[axis] != shape_[axis + 1] * strides_[axis + 1]) return Clone().FlattenRows();
  }
  Tensor view = *this;
  view.shape_ = {size() / shape_.back(), shape_.back()};
  view.strides_ = {rank() >= 2 ? strides_[rank() - 2] : shape_.back(), strides_.back()};
  return view;
}

namespace {

// Copies `shape` elements between two strided layouts, innermost axis last.
void CopyStrided(const float* from, const Shape& from_strides, float* to, const Shape& to_strides,
                 const Shape& shape, int axis) {
  if (axis == static_cast<int>(shape.size()) - 1) {
    for (int64_t i = 0; i < shape[axis]; ++i)
      to[i * to_strides[axis]] = from[i * from_strides[axis]];
    return;
  }
  for (int64_t i = 0; i < shape[axis]; ++i) {
    CopyStrided(from + i * from_strides[axis], from_strides, to + i * to_strides[axis], to_strides,
                shape, axis + 1);
  }
}

}  // namespace

Tensor Tensor::Clone() const {
  Tensor copy(shape_);
  if (is_contiguous()) {
    std::memcpy(copy.data_, data_, static_cast<size_t>(size()) * sizeof(float));
  } else if (rank() > 0) {
    CopyStrided(data_, strides_, copy.data_, copy.strides_, shape_, 0);
  }
  return copy;
}

void Tensor::Fill(float value) {
  if (is_contiguous()) {
    std::fill(data_, data_ + size(), value);
    return;
  }
  // Rare for strided views: go through a contiguous copy of the pattern.
  Tensor filled(shape_);
  std::fill(filled.data_, filled.data_ + filled.size(), value);
  CopyStrided(filled.data_, filled.strides_, data_, strides_, shape_, 0);
}

std::string Tensor::ShapeString() const { return ShapeToString(shape_); }

// Blocks checked by an integer reduction on the exponent bits (all set: NaN or infinity),
// which vectorizes; the exact index is looked for only in a block that has one.
int64_t FirstNonFinite(const float* values, int64_t count) {
  constexpr int64_t kBlock = 4096;
  constexpr uint32_t kExponent = 0x7f800000u;
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t end = std::min(count, start + kBlock);
    uint32_t any = 0;
    for (int64_t i = start; i < end; ++i) {
      any |= (std::bit_cast<uint32_t>(values[i]) & kExponent) == kExponent;
    }
    if (any == 0) continue;
    for (int64_t i = start; i < end; ++i) {
      if (!std::isfinite(values[i])) return i;
    }
  }
  return -1;
}

}  // namespace attnserve
