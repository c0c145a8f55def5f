// One model's scheduler: a thread that owns the model and runs an engine loop over a bounded
// queue. Each iteration it takes what is waiting (up to max_batch_size, waiting at most
// max_queue_delay for more), drops requests whose deadline passed or whose caller went away,
// runs NextToken and Score requests as one engine batch each, starts new generations with a
// batched prefill, and advances every running generation by one token in one batched decode
// step: continuous batching, sequences join and leave between steps.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/models/model.h"
#include "engine/page_warmer.h"
#include "server/completion_estimate.h"
#include "server/server_metrics.h"
#include "server/task.h"
#include "server/token_text.h"

namespace attnserve::server {

struct WorkerOptions {
  int64_t max_batch_size = 32;
  absl::Duration max_queue_delay = absl::ZeroDuration();
  int64_t max_queue_size = 256;
  int compute_threads = 1;  // OpenMP threads of this model's engine calls
  // How long the idle scheduler polls for new work before sleeping: a request arriving within
  // it starts without a futex wake-up (about 100 µs on these machines).
  absl::Duration idle_spin = absl::Microseconds(300);
};

class ModelWorker {
 public:
  ModelWorker(std::string name, std::unique_ptr<Model> model, WorkerOptions options,
              ServerMetrics& metrics);
  ~ModelWorker();  // drains, then joins the thread

  // Queues a validated task; UNAVAILABLE (retryable) when the queue is full, when the work queued
  // ahead would make it miss its deadline, or when draining.
  absl::Status Submit(std::shared_ptr<Task> task);
  // Stops accepting work and returns once everything accepted has finished.
  void Drain();

  const std::string& name() const { return name_; }
  const Model& model() const { return *model_; }
  int64_t max_context() const { return model_->config.max_positions; }

 private:
  struct Generation {
    std::shared_ptr<Task> task;
    std::unique_ptr<DecoderState> state;    // causal LMs
    std::unique_ptr<Seq2SeqState> seq2seq;  // encoder-decoders: the encoded source too
    std::mt19937_64 rng;
    Utf8Stream text;
    int64_t prompt_tokens = 0, generated = 0, next_token = -1;
  };

  void Run();
  std::vector<std::shared_ptr<Task>> TakeWork();
  void RunNextToken(const std::vector<std::shared_ptr<Task>>& tasks);
  void RunScore(const std::vector<std::shared_ptr<Task>>& tasks);
  void RunEmbed(const std::shared_ptr<Task>& task);
  void StartGenerations(const std::vector<std::shared_ptr<Task>>& tasks);
  void StepGenerations();
  // One batched engine step for generations, whichever architecture decodes.
  absl::StatusOr<Tensor> Advance(const std::vector<Generation*>& generations,
                                 const TokenSequences& tokens);
  // Samples from one row of logits, emits the token or finishes; false when finished.
  bool Emit(Generation& generation, const float* logits);
  // Frees a counted generation's cache and uncounts it, then completes its call: a caller who
  // has seen the end never sees the sequence still held.
  void End(Generation& generation, absl::Status status);

  const std::string name_;
  const std::unique_ptr<Model> model_;
  const WorkerOptions options_;
  ServerMetrics& metrics_;
  metrics::Gauge& queue_length_;
  metrics::Gauge& active_sequences_;  // generations counted from prefill until End
  const int64_t end_of_text_;

  // std::mutex rather than absl::Mutex: Debian builds abseil without ThreadSanitizer's
  // annotations, so make test-tsan would not see absl::Mutex's ordering.
  std::mutex mutex_;                    // guards what follows
  std::condition_variable work_ready_;  // queue_ grew, or draining_ was set
  std::deque<std::shared_ptr<Task>> queue_;
  int64_t queued_tokens_ = 0;       // input tokens of queue_'s tasks
  std::atomic<int64_t> queued_{0};  // about queue_.size(), read without the lock by the idle spin
  CompletionEstimate completion_;
  bool draining_ = false;
  std::vector<Generation> generations_;  // scheduler thread only
  PageWarmer weight_pages_;              // scheduler thread only
  std::thread thread_;
};

}  // namespace attnserve::server
