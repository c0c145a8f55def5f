#include "server/call_gate.h"

namespace attnserve::server {

bool CallGate::Enter() {
  std::lock_guard lock(mutex_);
  ++inside_;
  return !closed_;
}

void CallGate::Leave() {
  std::lock_guard lock(mutex_);
  if (--inside_ == 0) left_.notify_all();
}

int64_t CallGate::CloseAndWait(absl::Time deadline) {
  std::unique_lock lock(mutex_);
  closed_ = true;
  left_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return inside_ == 0; });
  return inside_;
}

bool CallGate::open() const {
  std::lock_guard lock(mutex_);
  return !closed_;
}

}  // namespace attnserve::server
