#include "engine/attention/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "engine/bf16.h"
#include "engine/f16.h"

namespace attnserve {

int64_t BlockTable::capacity() const {
  if (pool_ == nullptr) return INT64_MAX;
  return static_cast<int64_t>(blocks_.size()) * pool_->block_tokens();
}

int64_t BlockTable::BlocksFor(int64_t total) const {
  if (pool_ == nullptr) return 0;
  return std::max<int64_t>(0,
                           pool_->shape().BlocksFor(total) - static_cast<int64_t>(blocks_.size()));
}

bool BlockTable::Reserve(int64_t total) {
  const int64_t missing = BlocksFor(total);
  if (missing == 0) return true;
  if (pool_->free_blocks() < missing) return false;
  for (int64_t i = 0; i < missing; ++i) blocks_.push_back(pool_->Allocate());
  return true;
}

int64_t BlockTable::ReusePrefix(std::span<const int64_t> prompt) {
  if (pool_ == nullptr || !share_ || !blocks_.empty()) return 0;
  const int64_t size = pool_->block_tokens();
  const int64_t reusable = (static_cast<int64_t>(prompt.size()) - 1) / size;  // keep one token
  int32_t parent = -1;
  for (int64_t b = 0; b < reusable; ++b) {
    const int32_t block = pool_->Lookup(parent, prompt.subspan(b * size, size));
    if (block < 0) break;
    blocks_.push_back(block);
    parent = block;
  }
  published_ = static_cast<int64_t>(blocks_.size());
  const int64_t reused = published_ * size;
  tokens_.assign(prompt.begin(), prompt.begin() + reused);
  return reused;
}

void BlockTable::Commit(std::span<const int64_t> fed) {
  tokens_.insert(tokens_.end(), fed.begin(), fed.end());
  if (pool_ == nullptr || !share_) return;
  const int64_t size = pool_->block_tokens();
  for (; (published_ + 1) * size <= tokens(); ++published_) {
    const int32_t parent = published_ == 0 ? -1 : blocks_[published_ - 1];
    pool_->Publish(parent, std::span(tokens_).subspan(published_ * size, size),
                   blocks_[published_]);
  }
}

void BlockTable::Clear() {
  for (int32_t block : blocks_) pool_->Release(block);
  blocks_.clear();
  tokens_.clear();
  published_ = 0;
}

void LayerCache::Append(const float* keys, int64_t key_stride, const float* values,
                        int64_t value_stride, int64_t count) {
  const KvBlockPool& pool = *table_->pool();
  const int64_t size = pool.block_tokens();
  const int64_t key_width = pool.shape().key_width, value_width = pool.shape().value_width;
  const KvCacheType type = pool.shape().type;
  const auto copy = [type](const float* from, int64_t width, std::byte* to) {
    switch (type) {
      case KvCacheType::kFloat32:
        std::memcpy(to, from, width * sizeof(float));
        break;
      case KvCacheType::kF16:
        ToF16(from, width, reinterpret_cast<Half*>(to));
        break;
      case KvCacheType::kBf16:
        for (int64_t i = 0; i < width; ++i) reinterpret_cast<uint16_t*>(to)[i] = ToBf16(from[i]);
        break;
    }
  };
  const int64_t element = pool.shape().ElementBytes();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = length_ + i;
    const int32_t block = table_->blocks()[row / size];
    copy(keys + i * key_stride, key_width,
         pool.keys(layer_, block) + (row % size) * key_width * element);
    copy(values + i * value_stride, value_width,
         pool.values(layer_, block) + (row % size) * value_width * element);
  }
  length_ += count;
}

template <typename T>
RowBlocksOf<T> LayerCache::ListBlocks(bool keys) const {
  const KvBlockPool& pool = *table_->pool();
  auto& blocks = [&]() -> std::vector<const T*>& {
    if constexpr (std::is_same_v<T, float>) {
      return float_blocks_[keys ? 0 : 1];
    } else if constexpr (std::is_same_v<T, Half>) {
      return f16_blocks_[keys ? 0 : 1];
    } else {
      return bf16_blocks_[keys ? 0 : 1];
    }
  }();
  blocks.clear();
  for (int32_t block : table_->blocks()) {
    blocks.push_back(
        reinterpret_cast<const T*>(keys ? pool.keys(layer_, block) : pool.values(layer_, block)));
  }
  return RowBlocksOf<T>{blocks.data(), pool.block_tokens(),
                        keys ? pool.shape().key_width : pool.shape().value_width};
}

template <typename T>
RowBlocksOf<T> LayerCache::keys() const {
  return ListBlocks<T>(true);
}

template <typename T>
RowBlocksOf<T> LayerCache::values() const {
  return ListBlocks<T>(false);
}

template RowBlocksOf<float> LayerCache::keys<float>() const;
template RowBlocksOf<float> LayerCache::values<float>() const;
template RowBlocksOf<Half> LayerCache::keys<Half>() const;
template RowBlocksOf<Half> LayerCache::values<Half>() const;
template RowBlocksOf<uint16_t> LayerCache::keys<uint16_t>() const;
template RowBlocksOf<uint16_t> LayerCache::values<uint16_t>() const;

}  // namespace attnserve
