#include "client/bench/load_generator.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

namespace attnserve::client {
namespace {

// Shared by the callers of one level: the samples, and when to stop.
class Recorder {
 public:
  Recorder(absl::Time measure_from, const RunLimits& limits)
      : measure_from_(measure_from), limits_(limits) {}

  // Whether another call should start (due at `due`).
  bool Admit(absl::Time due) {
    if (limits_.requests > 0) {
      return due < measure_from_ || admitted_.fetch_add(1) < limits_.requests;
    }
    return due < measure_from_ + limits_.duration;
  }
  void Add(Sample sample) {
    if (sample.due < measure_from_) return;  // warm-up
    std::lock_guard lock(mutex_);
    samples_.push_back(std::move(sample));
  }
  std::vector<Sample> Snapshot() {
    std::lock_guard lock(mutex_);
    return samples_;
  }
  std::vector<Sample> Take() {
    std::lock_guard lock(mutex_);
    return std::move(samples_);
  }

 private:
  const absl::Time measure_from_;
  const RunLimits limits_;
  std::atomic<int64_t> admitted_{0};
  std::mutex mutex_;  // guards samples_
  std::vector<Sample> samples_;
};

// Closed loop: each client calls again as soon as it is answered.
void RunClosed(const Workload& workload, int64_t clients, uint64_t seed, Recorder& recorder) {
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937_64 rng(seed + c);
      for (absl::Time due = absl::Now(); recorder.Admit(due); due = absl::Now()) {
        recorder.Add(workload.Call(rng, due));
      }
    });
  }
  for (auto& thread : threads) thread.join();
}

// Open loop: calls fall due at even intervals whatever the answers do, and each one's latency
// counts from when it was due, so a slow server cannot hide queueing in the client.
void RunOpen(const Workload& workload, const LoadLevel& level, absl::Time start, uint64_t seed,
             Recorder& recorder) {
  const absl::Duration interval = absl::Seconds(1.0 / level.rate);
  std::atomic<int64_t> next{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < level.max_in_flight; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937_64 rng(seed + c);
      while (!done.load()) {
        const absl::Time due = start + interval * next.fetch_add(1);
        if (!recorder.Admit(due)) {
          done = true;
          break;
        }
        const absl::Time now = absl::Now();
        if (due > now) absl::SleepFor(due - now);
        recorder.Add(workload.Call(rng, due));
      }
    });
  }
  for (auto& thread : threads) thread.join();
}

}  // namespace

LevelResult RunLevel(const Workload& workload, const LoadLevel& level, const RunLimits& limits,
                     uint64_t seed, const Progress& progress) {
  const absl::Time start = absl::Now();
  const absl::Time measure_from = start + limits.warmup;
  Recorder recorder(measure_from, limits);
  std::mutex mutex;
  std::condition_variable wake;
  bool finished = false;  // guarded by mutex
  std::thread reporter([&] {
    std::unique_lock lock(mutex);
    while (!wake.wait_for(lock, std::chrono::milliseconds(200), [&] { return finished; })) {
      const absl::Time now = absl::Now();
      if (progress && now > measure_from) progress(recorder.Snapshot(), now - measure_from);
    }
  });
  if (level.rate > 0) {
    RunOpen(workload, level, start, seed, recorder);
  } else {
    RunClosed(workload, level.concurrency, seed, recorder);
  }
  LevelResult result;
  result.level = level;
  result.elapsed = absl::Now() - measure_from;
  {
    std::lock_guard lock(mutex);
    finished = true;
  }
  wake.notify_one();
  reporter.join();
  result.samples = recorder.Take();
  return result;
}

}  // namespace attnserve::client
