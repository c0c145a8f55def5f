// Admits inference calls until shutdown begins, and counts those admitted until gRPC is done
// with them. Shutdown waits on the gate for the work in flight and then shuts the gRPC server
// down at once: grpc::Server::Shutdown with a grace period also waits for idle client
// connections to go away, which took 5 s with one idle Python channel and nothing in flight.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace attnserve::server {

// UNAVAILABLE for a call refused because the server is shutting down, marked so that protocols
// that tell it apart from a full queue can (HTTP answers 503 to the one, 429 to the other).
absl::Status ShuttingDownError();
bool IsShuttingDown(const absl::Status& status);

class CallGate {
 public:
  // Any thread. Counts the call until its Leave, once gRPC is done with it; false when closed,
  // and the call is to be refused (counted still, so that its refusal is sent before shutdown).
  bool Enter();
  void Leave();
  // Stops admitting, then waits until every admitted call has left or `deadline` passes;
  // returns the calls still in flight.
  int64_t CloseAndWait(absl::Time deadline);
  // Still admitting: not yet closed by shutdown.
  bool open() const;

 private:
  mutable std::mutex mutex_;  // guards what follows
  std::condition_variable left_;
  bool closed_ = false;
  int64_t inside_ = 0;
};

}  // namespace attnserve::server
