#include "engine/page_warmer.h"

#include <algorithm>

namespace attnserve {

int64_t PageWarmer::Step(int64_t pages) {
  const int64_t end = std::min(next_page_ + pages, page_count());
  const int64_t read = end - next_page_;
  for (; next_page_ < end; ++next_page_) {
    // A read the compiler must keep: the translation is the point, not the byte.
    const uint8_t* byte = memory_.bytes.data() + next_page_ * kPageBytes;
    asm volatile("" : : "r"(*byte) : "memory");
  }
  return std::max<int64_t>(read, 0);
}

}  // namespace attnserve
