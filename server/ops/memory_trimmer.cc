#include "server/ops/memory_trimmer.h"

#include <malloc.h>

#include "absl/time/clock.h"
#include "engine/tensor.h"

namespace attnserve::server {

MemoryTrimmer::MemoryTrimmer(TrimPolicy policy) : policy_(policy), thread_([this] { Run(); }) {}

MemoryTrimmer::~MemoryTrimmer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

int64_t MemoryTrimmer::FreeBytesHeld() {
  return static_cast<int64_t>(mallinfo2().fordblks);  // fast bins' chunks included
}

void MemoryTrimmer::Run() {
  int64_t allocations = TensorAllocations();
  absl::Time last_trim = absl::Now();
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, absl::ToChronoNanoseconds(policy_.interval),
                         [this] { return stopping_; })) {
    const int64_t now_allocations = TensorAllocations();
    const bool idle = now_allocations == allocations;
    allocations = now_allocations;
    if (FreeBytesHeld() < policy_.min_free_bytes) continue;
    if (!idle && absl::Now() - last_trim < policy_.busy_interval) continue;
    malloc_trim(0);
    last_trim = absl::Now();
  }
}

}  // namespace attnserve::server
