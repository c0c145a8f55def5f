// One model's KV cache as the scheduler manages it: the pool of blocks (with its reference
// counts, prefix index and eviction, engine/attention/kv_block_pool.h) and a block table per
// sequence. The scheduler reserves, reuses and frees blocks here; the engine only writes the
// keys and values of the tokens it is fed into the blocks a table lists (vLLM v1's
// KVCacheManager plays this part).
//
// Without a pool (no layer keeps keys in blocks, as with linear attention) every sequence fits
// and holds nothing. Not thread-safe: the scheduler's thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "engine/attention/kv_block_pool.h"
#include "engine/attention/kv_cache.h"

namespace attnserve::server {

class KvCacheManager {
 public:
  // share_prefixes: a sequence's full blocks are published and later prompts with the same
  // prefix reuse them (causal LMs whose keys and values depend on the tokens alone).
  KvCacheManager(std::unique_ptr<KvBlockPool> pool, bool share_prefixes)
      : pool_(std::move(pool)), share_prefixes_(share_prefixes) {}

  bool has_pool() const { return pool_ != nullptr; }
  KvBlockPool* pool() const { return pool_.get(); }
  int64_t block_tokens() const { return pool_ ? pool_->block_tokens() : 0; }
  int64_t total_blocks() const { return pool_ ? pool_->total_blocks() : 0; }
  int64_t free_blocks() const { return pool_ ? pool_->free_blocks() : 0; }
  // Tokens the whole pool holds.
  int64_t capacity_tokens() const { return total_blocks() * block_tokens(); }
  // Blocks that hold `tokens` tokens (0 without a pool).
  int64_t BlocksFor(int64_t tokens) const { return pool_ ? pool_->shape().BlocksFor(tokens) : 0; }

  // An empty table for a sequence's own tokens, and one that only counts the blocks an
  // encoder-decoder's encoded source takes (its keys live with the engine, as many bytes).
  std::unique_ptr<BlockTable> NewTable() const {
    return std::make_unique<BlockTable>(pool_.get(), share_prefixes_);
  }
  std::unique_ptr<BlockTable> NewCountingTable() const {
    return std::make_unique<BlockTable>(pool_.get(), false);
  }

  // Fills an empty table with the published blocks of the longest cached prefix of `tokens`
  // (leaving the last token to compute); returns the tokens reused.
  int64_t ReusePrefix(BlockTable& table, std::span<const int64_t> tokens) const {
    return table.ReusePrefix(tokens);
  }
  // Blocks until `total` tokens fit in the table; false, allocating nothing, when too few are
  // free.
  bool Reserve(BlockTable& table, int64_t total) const { return table.Reserve(total); }
  void Free(BlockTable& table) const { table.Clear(); }

 private:
  std::unique_ptr<KvBlockPool> pool_;
  bool share_prefixes_;
};

}  // namespace attnserve::server
