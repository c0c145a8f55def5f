// What one attention layer keeps for one sequence between decoding steps: its keys and values,
// preallocated to a fixed capacity so a step never reallocates, or, for causal linear
// attention, the running recurrent state instead.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/attention/linear.h"
#include "engine/tensor.h"

namespace attnserve {

class LayerCache {
 public:
  // Softmax-family attention: room for `capacity` tokens of keys and values.
  LayerCache(int64_t capacity, int64_t key_width, int64_t value_width);
  // Linear attention: a recurrent state, whose size does not grow with the context.
  explicit LayerCache(LinearAttentionState state);

  int64_t length() const { return linear_ ? linear_->tokens() : length_; }
  int64_t capacity() const { return capacity_; }
  bool is_linear() const { return linear_.has_value(); }
  LinearAttentionState& linear_state() { return *linear_; }

  // Copies `count` rows (row strides given) after the cached ones; the caller checked capacity.
  void Append(const float* keys, int64_t key_stride, const float* values, int64_t value_stride,
              int64_t count);
  // [1, length, width] views of what is cached.
  Tensor keys() const { return keys_.Slice(0, 0, length_).Reshape({1, length_, keys_.dim(1)}); }
  Tensor values() const {
    return values_.Slice(0, 0, length_).Reshape({1, length_, values_.dim(1)});
  }

 private:
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  Tensor keys_, values_;  // [capacity, H·dk], [capacity, H·dv]
  std::optional<LinearAttentionState> linear_;
};

}  // namespace attnserve
