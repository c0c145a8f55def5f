// Walks a model's weights one read per page, so that their address translations are cached
// before the engine needs them.
//
// On these machines every system call flushes the TLB (kernel page-table isolation without PCID;
// docs/serving.md), and the first engine pass after one pays for a page walk on every page of
// weights: about 70 µs on the demo model. A serving thread that is spinning for work anyway pays
// them instead, a few pages at a time, off the request's path.
#pragma once

#include <cstdint>

#include "engine/safetensors.h"

namespace attnserve {

class PageWarmer {
 public:
  static constexpr int64_t kPageBytes = 4096;

  explicit PageWarmer(FileBytes memory) : memory_(std::move(memory)) {}

  // Starts a new pass from the first page.
  void Restart() { next_page_ = 0; }
  // Reads up to `pages` more pages of this pass; returns how many it read, 0 once the pass is
  // complete.
  int64_t Step(int64_t pages);

  int64_t page_count() const {
    return (static_cast<int64_t>(memory_.bytes.size()) + kPageBytes - 1) / kPageBytes;
  }

 private:
  FileBytes memory_;
  int64_t next_page_ = 0;
};

}  // namespace attnserve
