#include "engine/attention/kv_block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace attnserve {

const char* KvCacheTypeName(KvCacheType type) {
  switch (type) {
    case KvCacheType::kFloat32:
      return "float32";
    case KvCacheType::kF16:
      return "f16";
    case KvCacheType::kBf16:
      return "bf16";
  }
  return "";
}

std::optional<KvCacheType> KvCacheTypeNamed(std::string_view name) {
  for (KvCacheType type : {KvCacheType::kFloat32, KvCacheType::kF16, KvCacheType::kBf16}) {
    if (name == KvCacheTypeName(type)) return type;
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<KvBlockPool>> KvBlockPool::Create(const KvBlockShape& shape,
                                                                 int64_t blocks,
                                                                 int64_t max_cached_blocks) {
  if (shape.layers < 1 || shape.key_width < 1 || shape.value_width < 1 || shape.block_tokens < 1 ||
      blocks < 1 || blocks > INT32_MAX || max_cached_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV block pool: bad shape (", shape.layers, " layers, widths ", shape.key_width, "/",
        shape.value_width, ", ", shape.block_tokens, " tokens per block) or block count ", blocks));
  }
  const size_t bytes =
      (static_cast<size_t>(blocks) * static_cast<size_t>(shape.BlockBytes()) + 63) / 64 * 64;
  // A server's pool is mapped: its untouched blocks cost address space only, never resident
  // memory, and no allocator walks or poisons gigabytes of it (AddressSanitizer did, for
  // seconds at exit). A small private pool (NewState(capacity)) comes from the heap, whose
  // freed memory the next state reuses instead of faulting fresh pages in (11% of a 128-token
  // prefill of the GPT-2-small shape).
  const bool mapped = bytes >= kMapAbove;
  void* storage = mapped ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                         : std::aligned_alloc(64, bytes);
  if (storage == (mapped ? MAP_FAILED : nullptr)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV block pool: cannot allocate ", bytes, " bytes for ", blocks, " blocks"));
  }
  return std::unique_ptr<KvBlockPool>(new KvBlockPool(
      shape, blocks, max_cached_blocks, static_cast<std::byte*>(storage), mapped ? bytes : 0));
}

KvBlockPool::KvBlockPool(const KvBlockShape& shape, int64_t blocks, int64_t max_cached_blocks,
                         std::byte* storage, size_t mapped_bytes)
    : shape_(shape),
      storage_(storage),
      mapped_bytes_(mapped_bytes),
      max_cached_blocks_(max_cached_blocks),
      references_(blocks, 0),
      generations_(blocks, 0),
      published_(blocks, index_.end()),
      lru_place_(blocks) {
  // Block 0 first, so the resident part of the pool grows from its start.
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

KvBlockPool::~KvBlockPool() {
  if (mapped_bytes_ > 0) {
    munmap(storage_, mapped_bytes_);
  } else {
    std::free(storage_);
  }
}

int32_t KvBlockPool::Allocate() {
  int32_t block = -1;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!unreferenced_published_.empty()) {
    block = unreferenced_published_.front();
    unreferenced_published_.pop_front();
    Unpublish(block);
  } else {
    return -1;
  }
  ++generations_[block];
  references_[block] = 1;
  touched_blocks_ = std::max<int64_t>(touched_blocks_, block + 1);
  return block;
}

void KvBlockPool::Retain(int32_t block) {
  if (references_[block]++ == 0) {
    // Only published blocks are found while unreferenced.
    assert(published_[block] != index_.end());
    unreferenced_published_.erase(lru_place_[block]);
  }
}

void KvBlockPool::Release(int32_t block) {
  assert(references_[block] > 0);
  if (--references_[block] > 0) return;
  if (published_[block] != index_.end()) {
    lru_place_[block] = unreferenced_published_.insert(unreferenced_published_.end(), block);
  } else {
    free_.push_back(block);
  }
  if (static_cast<int64_t>(unreferenced_published_.size()) > max_cached_blocks_) {
    const int32_t evicted = unreferenced_published_.front();
    unreferenced_published_.pop_front();
    Unpublish(evicted);
    free_.push_back(evicted);
  }
}

KvBlockPool::PrefixKey KvBlockPool::KeyFor(int32_t parent, std::span<const int64_t> tokens) const {
  return PrefixKey{parent, parent < 0 ? 0 : generations_[parent],
                   std::vector<int64_t>(tokens.begin(), tokens.end())};
}

int32_t KvBlockPool::Lookup(int32_t parent, std::span<const int64_t> tokens) {
  auto it = index_.find(KeyFor(parent, tokens));
  if (it == index_.end()) return -1;
  Retain(it->second);
  return it->second;
}

void KvBlockPool::Publish(int32_t parent, std::span<const int64_t> tokens, int32_t block) {
  assert(references_[block] > 0 && published_[block] == index_.end());
  auto [it, inserted] = index_.emplace(KeyFor(parent, tokens), block);
  if (inserted) published_[block] = it;
}

void KvBlockPool::Unpublish(int32_t block) {
  index_.erase(published_[block]);
  published_[block] = index_.end();
}

}  // namespace attnserve
