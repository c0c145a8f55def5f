#include "engine/weight_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

namespace attnserve {

std::shared_ptr<void> AllocateWeightMemory(size_t bytes) {
  constexpr size_t kHugePage = 2 << 20;
  if (bytes < kHugePage) {
    void* memory = nullptr;
    if (posix_memalign(&memory, 64, bytes == 0 ? 64 : bytes) != 0) throw std::bad_alloc();
    return std::shared_ptr<void>(memory, std::free);
  }
  // A mapping of its own from a 2 MB boundary (the unaligned ends of a larger mapping are
  // unmapped again), whole 4 KB pages long: a last partial huge page stays in small pages rather
  // than being resident in full (rounding every block up to 2 MB cost SmolLM2 110 MB in float32).
  // Not from the heap: the load frees each float tensor once it is quantized, and large weights
  // placed in the heap between such freed blocks kept the heap, with its free holes, as large as
  // everything the load touched.
  constexpr size_t kPage = 4096;
  const size_t length = (bytes + kPage - 1) / kPage * kPage;
  void* mapping =
      mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(mapping);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(mapping, aligned - start);
  if (start + kHugePage > aligned) {
    munmap(reinterpret_cast<void*>(aligned + length), start + kHugePage - aligned);
  }
  void* memory = reinterpret_cast<void*>(aligned);
  madvise(memory, length, MADV_HUGEPAGE);
  return std::shared_ptr<void>(memory, [length](void* p) { munmap(p, length); });
}

}  // namespace attnserve
