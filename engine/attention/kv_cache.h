// What a sequence keeps between decoding steps. For softmax-family attention: keys and values in
// blocks of a KvBlockPool, listed in the sequence's BlockTable (one table for all layers, as
// every layer caches the same tokens). For causal linear attention: the running recurrent state,
// whose size does not grow with the context.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/attention/kv_block_pool.h"
#include "engine/attention/linear.h"
#include "engine/attention/scaled_dot_product.h"
#include "engine/tensor.h"

namespace attnserve {

// The blocks one sequence's tokens use, in order. Without a pool (linear attention) it holds
// nothing and has room for any length.
class BlockTable {
 public:
  // share_prefixes: publish full blocks and reuse published ones (causal LMs, whose keys and
  // values depend on the tokens alone; not a decoder that also attends to a source).
  BlockTable(KvBlockPool* pool, bool share_prefixes) : pool_(pool), share_(share_prefixes) {}
  ~BlockTable() { Clear(); }
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  KvBlockPool* pool() const { return pool_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int64_t tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t capacity() const;
  // Blocks still to allocate for room for `total` tokens.
  int64_t BlocksFor(int64_t total) const;
  // Allocates blocks until `total` tokens fit; false, with nothing allocated, when the pool has
  // too few free blocks.
  bool Reserve(int64_t total);
  // On an empty table: retains the longest published prefix of `prompt` in whole blocks,
  // leaving at least its last token to compute, and returns the tokens reused.
  int64_t ReusePrefix(std::span<const int64_t> prompt);
  // Records tokens whose keys and values every layer has just written, and publishes the
  // blocks they filled.
  void Commit(std::span<const int64_t> fed);
  // Releases every block (a finished or preempted sequence).
  void Clear();

 private:
  KvBlockPool* pool_;
  bool share_;
  std::vector<int32_t> blocks_;
  std::vector<int64_t> tokens_;  // committed tokens, whose keys and values are written
  int64_t published_ = 0;        // leading blocks published or reused
};

class LayerCache {
 public:
  // Softmax-family attention: layer `layer`'s rows in the table's blocks.
  LayerCache(const BlockTable* table, int64_t layer) : table_(table), layer_(layer) {}
  // Linear attention: a recurrent state.
  explicit LayerCache(LinearAttentionState state) : linear_(std::move(state)) {}

  int64_t length() const { return linear_ ? linear_->tokens() : length_; }
  int64_t capacity() const { return linear_ ? INT64_MAX : table_->capacity(); }
  bool is_linear() const { return linear_.has_value(); }
  LinearAttentionState& linear_state() { return *linear_; }

  // Copies `count` rows (row strides given) after the cached ones, as the pool's type; the
  // caller reserved room.
  void Append(const float* keys, int64_t key_stride, const float* values, int64_t value_stride,
              int64_t count);
  KvCacheType type() const { return table_->pool()->shape().type; }
  // Where the first `length` rows already are (reused from published blocks).
  void SetLength(int64_t length) { length_ = length; }
  // The cached rows, block by block; T is float for a kFloat32 pool, Half for kF16, uint16_t
  // (bfloat16 bits) for kBf16.
  template <typename T>
  RowBlocksOf<T> keys() const;
  template <typename T>
  RowBlocksOf<T> values() const;

 private:
  const BlockTable* table_ = nullptr;
  int64_t layer_ = 0;
  int64_t length_ = 0;
  // Lists this layer's block addresses (keys or values) in the vector kept for T.
  template <typename T>
  RowBlocksOf<T> ListBlocks(bool keys) const;
  // This layer's block addresses as keys() and values() last listed them: [0] keys, [1] values.
  mutable std::vector<const float*> float_blocks_[2];
  mutable std::vector<const Half*> f16_blocks_[2];
  mutable std::vector<const uint16_t*> bf16_blocks_[2];
  std::optional<LinearAttentionState> linear_;
};

}  // namespace attnserve
