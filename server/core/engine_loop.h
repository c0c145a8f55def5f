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
#include "server/core/executor.h"
#include "server/core/memory_budget.h"
#include "server/core/request_cost.h"
#include "server/core/scheduler.h"
#include "server/core/step_answers.h"
#include "server/core/task.h"
#include "server/ops/server_metrics.h"

namespace attnserve::server {

struct EngineLoopOptions {
  int64_t max_batch_size = 32;  // sequences decoding at once; requests per batch
  absl::Duration max_queue_delay = absl::ZeroDuration();
  int64_t max_queue_size = 256;
  int compute_threads = 1;  // OpenMP threads of this model's engine calls
  // How long the idle scheduler polls for new work before sleeping: a request arriving within
  // it starts without a futex wake-up (about 100 µs on these machines).
  absl::Duration idle_spin = absl::Microseconds(300);
  // Tokens per engine call, and so per unary request (TEI's name). Lowered at start to what
  // the model's activation budget holds.
  int64_t max_batch_tokens = 16384;
  // Tokens a step puts through the engine (vLLM's max_num_batched_tokens), prompt chunks and
  // unary requests together; a unary request larger than this runs alone. Larger steps cost
  // more per token once their activations leave the cache (docs/benchmarks.md).
  int64_t step_tokens = 2048;
  // The step's budget instead while generations decode, so their next token waits for little,
  // and what pacing sizes it by: the step's other work takes about this many times its decode
  // call (server/core/prefill_pacing.h; 0: always prefill_chunk_tokens).
  int64_t prefill_chunk_tokens = 256;
  double prefill_pacing = 1.0;
  int64_t kv_block_tokens = 32;
  // Tokens of finished sequences' prefixes kept for reuse (whole blocks; at most a quarter of the
  // pool): enough for the system prompts and recent conversations a chat server sees again, and
  // a bound that follows the model's KV size rather than the machine's memory.
  int64_t prefix_cache_tokens = 8192;
  int64_t max_response_bytes = 16 << 20;  // gRPC's message limit
  // The longest text one sequence may have: tokenizing takes memory in proportion to it.
  int64_t max_text_bytes = 256 << 10;
  // A Generate stream with this many events unsent is paused until its client reads.
  int64_t max_unsent_events = 4;
  ModelBudget budget{int64_t{256} << 20, int64_t{512} << 20, int64_t{256} << 20};
  // How the model keeps its linear layers' weights: float32, or int8 quantized at load.
  WeightFormat weights;
  // How its KV cache keeps keys and values; unset (auto): half precision for int8 weights,
  // float32 for float32 weights (whose users asked for float32 arithmetic).
  std::optional<KvCacheType> kv_cache;
  // The thread that delivers streamed generations' events and every step's endings (null: the
  // engine loop's own). It must outlive the loop.
  AnswerWriter* answers = nullptr;
};

// The KV cache type `options` choose for a model of `config`.
KvCacheType KvCacheTypeFor(const EngineLoopOptions& options, const ModelConfig& config);

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
  // Wakes the scheduler: a paused stream's client read. Any thread.
  void Poke();
  // The caller of `task` left: the scheduler drops it (answered CANCELLED) whether it waits or
  // runs; nothing when it has ended. Any thread.
  void Cancel(const Task& task);

  const std::string& name() const { return name_; }
  const Model& model() const { return *model_; }
  const EngineLoopOptions& options() const { return options_; }
  int64_t max_context() const { return model_->config.max_positions; }
  int64_t kv_cache_tokens() const { return kv_cache_tokens_; }
  const KvBlockShape& kv_block_shape() const { return kv_block_shape_; }

 private:
  EngineLoop(std::string name, std::unique_ptr<Model> model, EngineLoopOptions options,
             std::unique_ptr<KvBlockPool> pool, ServerMetrics& metrics);

  // Refusals of work that can never fit, counted by budget.
  absl::Status CheckFits(const Task& task, const RequestCost& cost);
  absl::Status Refuse(const char* budget, absl::Status status);
  void Run();
  // Waits until there is work, then moves submitted tasks to the scheduler; false once drained.
  bool AwaitWork();
  // Hands a step's answers to the answer writer (or delivers them here, without one).
  void Deliver(StepAnswers answers);
  void UpdateGauges(const StepPlan& plan);

  const std::string name_;
  const std::unique_ptr<Model> model_;
  const EngineLoopOptions options_;
  const int64_t kv_cache_tokens_;
  const KvBlockShape kv_block_shape_;
  ServerMetrics& metrics_;
  prometheus::Gauge& queue_length_;
  prometheus::Gauge& active_sequences_;  // generations counted from admission until they end
  prometheus::Gauge& paused_streams_;
  prometheus::Gauge& kv_used_;
  prometheus::Gauge& kv_cached_;
  prometheus::Gauge& kv_free_;
  prometheus::Gauge& kv_touched_;
  prometheus::Counter& reused_tokens_;
  prometheus::Counter& preemptions_;

  // std::mutex rather than absl::Mutex: Debian builds abseil without ThreadSanitizer's
  // annotations, so make test-tsan would not see absl::Mutex's ordering.
  // Guards the scheduler's queue (Submit and Cancel reach it from any thread), Schedule and
  // Update, and what follows.
  std::mutex mutex_;
  std::condition_variable work_ready_;  // work was queued or cancelled, or draining_ was set
  // Requests submitted so far, read without the lock by the idle spin.
  std::atomic<int64_t> arrivals_{0};
  std::atomic<bool> poked_{false};  // a paused stream's client read
  CompletionEstimate completion_;
  bool draining_ = false;
  // Bytes of answers admitted and not yet sent; shared with the tasks, which give theirs back
  // when their call is done.
  const std::shared_ptr<std::atomic<int64_t>> response_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
  Scheduler scheduler_;      // its queue under mutex_; its generations changed by this thread
  Executor executor_;        // scheduler thread only
  PageWarmer weight_pages_;  // scheduler thread only
  std::thread thread_;
};

}  // namespace attnserve::server
