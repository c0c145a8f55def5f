#include "server/core/call_gate.h"

#include "absl/strings/cord.h"

namespace attnserve::server {
namespace {
constexpr char kShuttingDown[] = "attnserve.shutting_down";
}  // namespace

absl::Status ShuttingDownError() {
  absl::Status status = absl::UnavailableError("the server is shutting down");
  status.SetPayload(kShuttingDown, absl::Cord());
  return status;
}

bool IsShuttingDown(const absl::Status& status) {
  return status.GetPayload(kShuttingDown).has_value();
}

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
