// Bytes counted against a shared ledger for as long as a holder lives: a task's answer against
// the server's response budget, from its admission until its call has sent it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

namespace attnserve::server {

class HeldBytes {
 public:
  HeldBytes() = default;
  HeldBytes(std::shared_ptr<std::atomic<int64_t>> ledger, int64_t bytes)
      : ledger_(std::move(ledger)), bytes_(bytes) {}
  HeldBytes(const HeldBytes&) = delete;
  HeldBytes& operator=(HeldBytes&& other) noexcept {
    std::swap(ledger_, other.ledger_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~HeldBytes() {
    if (ledger_) ledger_->fetch_sub(bytes_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<std::atomic<int64_t>> ledger_;
  int64_t bytes_ = 0;
};

}  // namespace attnserve::server
