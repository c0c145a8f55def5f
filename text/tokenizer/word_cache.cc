#include "text/tokenizer/word_cache.h"

#include <mutex>

namespace attnserve {

namespace {

size_t BytesOf(std::string_view word, const std::vector<WordCache::Piece>& pieces) {
  return word.size() + pieces.size() * sizeof(WordCache::Piece);
}

}  // namespace

bool WordCache::Find(std::string_view word, std::vector<Piece>& pieces) const {
  if (word.size() > kMaxBytes) return false;
  std::shared_lock lock(mutex_);
  auto it = words_.find(absl::string_view(word.data(), word.size()));
  if (it == words_.end()) return false;
  pieces.insert(pieces.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::Insert(std::string_view word, const std::vector<Piece>& pieces) {
  const size_t bytes = BytesOf(word, pieces);
  if (bytes > kMaxBytes) return;
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || words_.size() >= kCapacity || bytes_ + bytes > kMaxBytes) return;
  if (words_.try_emplace(absl::string_view(word.data(), word.size()), pieces).second) {
    bytes_ += bytes;
  }
}

}  // namespace attnserve
