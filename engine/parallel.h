// Parallel loops that cost nothing when they would run on one thread. libgomp ends every parallel
// region, even a team of one (OMP_NUM_THREADS=1, or an if() clause that is false), with a futex
// wake-up: 25 system calls per decoded token of the demo model, seen with
// `perf record -e syscalls:sys_enter_futex`. ParallelFor runs such loops inline instead.
#pragma once

#include <omp.h>

#include <cstdint>

namespace attnserve {

enum class Schedule {
  kStatic,   // iterations of equal cost
  kDynamic,  // iterations of uneven cost (sequences of different lengths), handed out one by one
};

// body(i) for every i in [0, count), across the OpenMP threads when there is more than one
// iteration, more than one thread, and `worth_threads` (the caller's judgement that the work
// outweighs waking threads).
template <typename Body>
void ParallelFor(int64_t count, const Body& body, Schedule schedule = Schedule::kStatic,
                 bool worth_threads = true) {
  if (!worth_threads || count < 2 || omp_in_parallel() || omp_get_max_threads() < 2) {
    for (int64_t i = 0; i < count; ++i) body(i);
  } else if (schedule == Schedule::kDynamic) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < count; ++i) body(i);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) body(i);
  }
}

}  // namespace attnserve
