#include "engine/weight_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace attnserve {

std::shared_ptr<void> AllocateWeightMemory(size_t bytes) {
  constexpr size_t kHugePage = 2 << 20;
  if (bytes == 0) bytes = 64;
  void* memory = nullptr;
  if (posix_memalign(&memory, bytes >= kHugePage ? kHugePage : 64, bytes) != 0) {
    throw std::bad_alloc();
  }
  if (bytes >= kHugePage) madvise(memory, bytes, MADV_HUGEPAGE);
  return std::shared_ptr<void>(memory, std::free);
}

}  // namespace attnserve
