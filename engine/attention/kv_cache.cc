#include "engine/attention/kv_cache.h"

#include <cstring>
#include <limits>

namespace attnserve {

LayerCache::LayerCache(int64_t capacity, int64_t key_width, int64_t value_width)
    : capacity_(capacity), keys_({capacity, key_width}), values_({capacity, value_width}) {}

LayerCache::LayerCache(LinearAttentionState state)
    : capacity_(std::numeric_limits<int64_t>::max()), linear_(std::move(state)) {}

void LayerCache::Append(const float* keys, int64_t key_stride, const float* values,
                        int64_t value_stride, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(keys_.row(length_ + i), keys + i * key_stride, keys_.dim(1) * sizeof(float));
    std::memcpy(values_.row(length_ + i), values + i * value_stride,
                values_.dim(1) * sizeof(float));
  }
  length_ += count;
}

}  // namespace attnserve
