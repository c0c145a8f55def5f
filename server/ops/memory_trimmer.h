// Hands memory that the allocator holds free back to the system, when that cannot slow the engine.
//
// The engine keeps freed memory for its next forward pass (engine/tensor.cc), and glibc never
// returns the free holes inside its heaps by itself: after an HTTP/2 rapid-reset burst (gRPC
// 1.51 allocates every reset stream's call and frees it later), resident memory stayed 450 MB to
// 1.5 GB above where it was, all of it free inside malloc. Every `interval`, when more than
// `min_free_bytes` are free, this calls malloc_trim if the engine allocated nothing since the last
// look (idle: nothing to slow down) or if the last trim is `busy_interval` old (a busy engine
// then refaults its working set once per busy_interval, not once per pass).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "absl/time/time.h"

namespace attnserve::server {

struct TrimPolicy {
  absl::Duration interval = absl::Seconds(1);
  absl::Duration busy_interval = absl::Seconds(30);
  int64_t min_free_bytes = int64_t{64} << 20;
};

class MemoryTrimmer {
 public:
  explicit MemoryTrimmer(TrimPolicy policy = {});
  ~MemoryTrimmer();  // stops the thread

  // Free bytes the allocator holds now (glibc's mallinfo2, over every arena).
  static int64_t FreeBytesHeld();

 private:
  void Run();

  const TrimPolicy policy_;
  std::mutex mutex_;  // guards stopping_
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace attnserve::server
