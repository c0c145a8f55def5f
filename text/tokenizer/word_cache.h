// The tokens of words a model has already tokenized, as the reference library keeps them for BPE
// (REFERENCE.md §6.1): real text repeats its words, and merging a word costs far more than
// finding it. Up to kCapacity words as in the reference, and unlike it, up to kMaxBytes of words
// and pieces (the reference would keep 10,000 paragraphs of any size); once full it keeps what it
// has. Safe to share between threads: lookups share a lock, and an insert that would wait for
// one is skipped.
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace attnserve {

class WordCache {
 public:
  static constexpr size_t kCapacity = 10000;
  static constexpr size_t kMaxBytes = size_t{4} << 20;

  struct Piece {
    int32_t id;
    uint32_t bytes;  // of the word
  };

  // Appends the word's pieces to `pieces` and returns true if the word is cached.
  bool Find(std::string_view word, std::vector<Piece>& pieces) const;
  void Insert(std::string_view word, const std::vector<Piece>& pieces);

 private:
  mutable std::shared_mutex mutex_;  // guards what follows
  absl::flat_hash_map<std::string, std::vector<Piece>> words_;
  size_t bytes_ = 0;  // of the words and their pieces
};

}  // namespace attnserve
