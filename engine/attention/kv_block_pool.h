// The paged KV cache's storage: keys and values of every cached sequence live in fixed-size
// blocks of one pool, sized once (by the server, from its memory budget). A sequence holds the
// blocks its tokens use, so memory follows the tokens in use, not sequences × maximum context
// (vLLM's PagedAttention). Block b of layer l holds block_tokens rows of keys and of values.
//
// Prefix reuse: a full block whose keys and values are fixed by the tokens before and in it (a
// causal LM's) can be published under those tokens. A later sequence with the same prefix
// retains the published blocks instead of computing them again. Published blocks stay indexed
// after their last holder releases them, until the pool needs them back or more than
// max_cached_blocks of them wait (least recently released first). Keys name a block's parent by
// index and generation, and a reused block starts a new generation, so an index entry can never
// match a prefix it was not computed from.
//
// Not thread-safe: one model's scheduler thread owns its pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve {

// How cached keys and values are stored: float32, or in two bytes, rounded to nearest even as
// they are written: half the memory and half the bytes a decoding step reads per token of
// context. Half precision (engine/f16.h) keeps 11 significant bits up to ±65504 (larger values
// saturate); bfloat16 (engine/bf16.h) 8 bits over float32's range (docs/benchmarks.md).
enum class KvCacheType { kFloat32, kF16, kBf16 };
// "float32", "f16" or "bf16", and back (nullopt for any other name).
const char* KvCacheTypeName(KvCacheType type);
std::optional<KvCacheType> KvCacheTypeNamed(std::string_view name);

struct KvBlockShape {
  int64_t layers = 0;       // layers with a key/value cache
  int64_t key_width = 0;    // H·dk
  int64_t value_width = 0;  // H·dv
  int64_t block_tokens = 32;
  KvCacheType type = KvCacheType::kFloat32;

  // Blocks that hold `tokens` tokens.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + block_tokens - 1) / block_tokens; }
  int64_t ElementBytes() const { return type == KvCacheType::kFloat32 ? 4 : 2; }
  // Bytes of one block across every layer.
  int64_t BlockBytes() const {
    return layers * block_tokens * (key_width + value_width) * ElementBytes();
  }
};

class KvBlockPool {
 public:
  // Storage for `blocks` blocks; a large pool's pages become resident as blocks are written.
  // At most `max_cached_blocks` published blocks are kept once nobody references them.
  static absl::StatusOr<std::unique_ptr<KvBlockPool>> Create(
      const KvBlockShape& shape, int64_t blocks,
      int64_t max_cached_blocks = std::numeric_limits<int64_t>::max());
  ~KvBlockPool();
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  const KvBlockShape& shape() const { return shape_; }
  int64_t block_tokens() const { return shape_.block_tokens; }
  int64_t total_blocks() const { return static_cast<int64_t>(references_.size()); }
  // Blocks Allocate can hand out now: never used, released, or published but unreferenced.
  int64_t free_blocks() const {
    return static_cast<int64_t>(free_.size() + unreferenced_published_.size());
  }
  int64_t used_blocks() const { return total_blocks() - free_blocks(); }
  // Published blocks nobody references: kept for prefix reuse, handed out when needed.
  int64_t cached_blocks() const { return static_cast<int64_t>(unreferenced_published_.size()); }
  // Blocks ever handed out. Released blocks are handed out again first, so this is the part
  // of a mapped pool that is resident: it grows to the most blocks in use plus those cached.
  int64_t touched_blocks() const { return touched_blocks_; }

  // A block with one reference, or -1 when every block is referenced. Takes never-published
  // blocks first, then evicts the least recently released published block.
  int32_t Allocate();
  void Retain(int32_t block);
  void Release(int32_t block);

  // The published block that follows `parent` (-1: the sequence's start) and holds exactly
  // `tokens` (block_tokens ids), retained for the caller; -1 when there is none.
  int32_t Lookup(int32_t parent, std::span<const int64_t> tokens);
  // Publishes a full, referenced `block` holding `tokens` after `parent`. When that prefix is
  // published already (two sequences computed it at once), the block stays private.
  void Publish(int32_t parent, std::span<const int64_t> tokens, int32_t block);

  // A block's rows of one layer, as elements of shape().type.
  std::byte* keys(int64_t layer, int32_t block) const {
    return layer_base(layer) + block * shape_.block_tokens * shape_.key_width * element_bytes();
  }
  std::byte* values(int64_t layer, int32_t block) const {
    return layer_base(layer) + (total_blocks() * shape_.block_tokens * shape_.key_width +
                                block * shape_.block_tokens * shape_.value_width) *
                                   element_bytes();
  }

 private:
  struct PrefixKey {
    int32_t parent;
    uint64_t parent_generation;
    std::vector<int64_t> tokens;
    bool operator<(const PrefixKey& other) const {
      return std::tie(parent, parent_generation, tokens) <
             std::tie(other.parent, other.parent_generation, other.tokens);
    }
  };
  using Index = std::map<PrefixKey, int32_t>;

  // Pools of this size and more are mapped rather than taken from the heap.
  static constexpr size_t kMapAbove = size_t{32} << 20;

  KvBlockPool(const KvBlockShape& shape, int64_t blocks, int64_t max_cached_blocks,
              std::byte* storage, size_t mapped_bytes);
  int64_t element_bytes() const { return shape_.ElementBytes(); }
  std::byte* layer_base(int64_t layer) const {
    return storage_ + layer * total_blocks() * shape_.BlockBytes() / shape_.layers;
  }
  PrefixKey KeyFor(int32_t parent, std::span<const int64_t> tokens) const;
  void Unpublish(int32_t block);

  KvBlockShape shape_;
  std::byte* storage_;
  size_t mapped_bytes_;  // 0: from the heap
  int64_t max_cached_blocks_;
  int64_t touched_blocks_ = 0;
  std::vector<int32_t> references_;
  std::vector<uint64_t> generations_;  // bumped each time a block is handed out anew
  std::vector<int32_t> free_;          // unreferenced and unpublished; back is handed out first
  Index index_;
  std::vector<Index::iterator> published_;  // per block: its index entry, or index_.end()
  // Published blocks nobody references, least recently released first, and each one's place.
  std::list<int32_t> unreferenced_published_;
  std::vector<std::list<int32_t>::iterator> lru_place_;
};

}  // namespace attnserve
