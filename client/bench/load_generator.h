// Drives a Workload at one load level: a fixed number of closed-loop clients, or a fixed
// request rate (open loop), for a duration or a request count, after a warm-up.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/time/time.h"
#include "client/bench/workload.h"

namespace attnserve::client {

struct LoadLevel {
  int64_t concurrency = 0;     // closed loop: this many clients, each calling again when answered
  double rate = 0;             // open loop: requests per second, due at even intervals
  int64_t max_in_flight = 64;  // open loop: callers; requests wait in line when all are busy
};

struct RunLimits {
  absl::Duration warmup = absl::Seconds(1);
  absl::Duration duration = absl::Seconds(10);  // of measurement, after the warm-up
  int64_t requests = 0;  // when positive: stop after this many measured requests instead
};

struct LevelResult {
  LoadLevel level;
  absl::Duration elapsed;       // of measurement
  std::vector<Sample> samples;  // measured calls only
};

// Progress while running: the calls measured so far and the time since measuring began.
using Progress = std::function<void(const std::vector<Sample>& so_far, absl::Duration elapsed)>;

LevelResult RunLevel(const Workload& workload, const LoadLevel& level, const RunLimits& limits,
                     uint64_t seed, const Progress& progress);

}  // namespace attnserve::client
