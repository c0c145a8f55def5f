// One model's engine loop: a thread that owns the model, admits work by what it costs
// (docs/serving.md, "The resource model") into a bounded queue, and runs steps: the scheduler
// (server/core/scheduler.h) plans each one with no model, the executor (server/core/executor.h)
// runs it, and the results go back to the scheduler.
//
// Submit refuses at once what can never fit (more tokens than --max_batch_tokens, more
// activation memory than the model's share, an answer over the message limit, a context
// larger than the KV cache) and, retryably, what cannot fit now: a full queue, answers not yet
// sent over their budget, or work queued ahead that would make it miss its deadline.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/architectures/model.h"
#include "engine/page_warmer.h"
#include "server/core/answer_writer.h"
#include "server/core/completion_estimate.h"
#include "server/core/engine_options.h"
#include "server/core/engine_sizing.h"
#include "server/core/executor.h"
#include "server/core/loop_gauges.h"
#include "server/core/memory_budget.h"
#include "server/core/model_constraints.h"
#include "server/core/request_cost.h"
#include "server/core/request_limits.h"
#include "server/core/scheduler.h"
#include "server/core/step_answers.h"
#include "server/core/task.h"
#include "server/ops/server_metrics.h"

namespace attnserve::server {

class EngineLoop {
 public:
  // Sizes the KV cache and the token budget from options.budget; refuses a budget that cannot
  // hold the model's context or one request of it.
  static absl::StatusOr<std::unique_ptr<EngineLoop>> Create(std::string name,
                                                            std::unique_ptr<Model> model,
                                                            EngineLoopOptions options,
                                                            ServerMetrics& metrics);
  ~EngineLoop();  // drains, then joins the thread

  // Queues a validated task. INVALID_ARGUMENT or RESOURCE_EXHAUSTED (naming the limit) for a
  // request that can never fit; UNAVAILABLE (retryable) when the queue is full, when the
  // answers not yet sent hold the response budget, when the work queued ahead would make it
  // miss its deadline, or when draining.
  absl::Status Submit(std::shared_ptr<Task> task);
  // Stops accepting work and returns once everything accepted has finished.
  void Drain();
  // The client of `task` read: its stream, if paused, runs again when few enough of its
  // events are unsent. Any thread.
  void Resume(const Task& task);
  // The caller of `task` left: the scheduler drops it (answered CANCELLED) whether it waits or
  // runs; nothing when it has ended. Any thread.
  void Cancel(const Task& task);

  const std::string& name() const { return name_; }
  const Model& model() const { return *model_; }
  const EngineLoopOptions& options() const { return options_; }
  int64_t max_context() const { return model_->config.max_positions; }
  int64_t kv_cache_tokens() const { return kv_cache_tokens_; }
  const KvBlockShape& kv_block_shape() const { return kv_block_shape_; }
  // Generate's constraints (JSON schemas, regexes, grammars) compiled for this model.
  const ModelConstraints& constraints() const { return constraints_; }

 private:
  EngineLoop(std::string name, std::unique_ptr<Model> model, EngineLoopOptions options,
             std::unique_ptr<KvBlockPool> pool, ServerMetrics& metrics);

  void Run();
  // Waits until there is work, then moves submitted tasks to the scheduler; false once drained.
  bool AwaitWork(std::unique_lock<std::mutex>& lock);
  // Hands a step's answers to the answer writer (or delivers them here, without one).
  void Deliver(StepAnswers answers);
  void Deliver(StepAnswers answers, bool hand_over);
  // Whether Deliver hands `answers` to the answer writer rather than delivering them here.
  bool HandsOver(const StepAnswers& answers) const;

  const std::string name_;
  const std::unique_ptr<Model> model_;
  const EngineLoopOptions options_;
  const int64_t kv_cache_tokens_;
  const KvBlockShape kv_block_shape_;
  ServerMetrics& metrics_;
  LoopGauges gauges_;
  const RequestLimits limits_;
  const ModelConstraints constraints_;

  // std::mutex rather than absl::Mutex: Debian builds abseil without ThreadSanitizer's
  // annotations, so make test-tsan would not see absl::Mutex's ordering.
  // Guards the scheduler's queue (Submit and Cancel reach it from any thread), Schedule and
  // Update, and what follows.
  std::mutex mutex_;
  // Work was queued or cancelled, a stream resumed, or draining_ was set.
  std::condition_variable work_ready_;
  // Requests submitted so far, read without the lock by the idle spin.
  std::atomic<int64_t> arrivals_{0};
  // Batches of answers handed to the answer writer and not yet delivered.
  const std::shared_ptr<std::atomic<int64_t>> handed_over_ =
      std::make_shared<std::atomic<int64_t>>(0);
  CompletionEstimate completion_;
  bool draining_ = false;
  // Bytes of answers admitted and not yet sent; shared with the tasks, which give theirs back
  // when their call is done.
  const std::shared_ptr<std::atomic<int64_t>> response_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
  Scheduler scheduler_;      // its queue under mutex_; its generations changed by this thread
  Executor executor_;        // this thread only
  PageWarmer weight_pages_;  // this thread only
  std::thread thread_;
};

}  // namespace attnserve::server
