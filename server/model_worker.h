// One model's scheduler: a thread that owns the model and runs an engine loop over a bounded
// queue, admitting work by what it costs (docs/serving.md, "The resource model").
//
// Submit refuses at once what can never fit (more tokens than --max_batch_tokens, more
// activation memory than the model's share, an answer over the message limit, a context
// larger than the KV cache) and, retryably, what cannot fit now. Each iteration (a step) then:
//   - drops cancelled and expired work;
//   - decodes one token for every running generation whose client keeps up (a stream with
//     max_unsent_events unsent is paused and holds no decoding slot);
//   - feeds prompts in chunks, so a long prompt shares steps with the decoding sequences
//     rather than stalling them;
//   - runs queued NextToken, Score and Embed requests, FIFO;
// prompts and requests within the step's token budget (step_tokens, or prefill_chunk_tokens
// while generations decode), all within the model's memory share. Generations' keys and values live
// in a paged KV cache (engine/attention/kv_block_pool.h) whose full prompt blocks are reused by
// later prompts with the same prefix. When the pool runs out, the newest generations (paused ones
// first) are preempted: their blocks are freed and their tokens fed again once blocks are free.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/models/model.h"
#include "engine/page_warmer.h"
#include "server/completion_estimate.h"
#include "server/generation.h"
#include "server/memory_budget.h"
#include "server/request_cost.h"
#include "server/server_metrics.h"
#include "server/task.h"

namespace attnserve::server {

struct WorkerOptions {
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
  // The step's budget instead while generations decode, so their next token waits for little.
  int64_t prefill_chunk_tokens = 256;
  int64_t kv_block_tokens = 32;
  int64_t max_response_bytes = 16 << 20;  // gRPC's message limit
  // The longest text one sequence may have: tokenizing takes memory in proportion to it.
  int64_t max_text_bytes = 256 << 10;
  // A Generate stream with this many events unsent is paused until its client reads.
  int64_t max_unsent_events = 4;
  ModelBudget budget{int64_t{256} << 20, int64_t{512} << 20, int64_t{256} << 20};
  // How the model keeps its linear layers' weights: float32, or int8 quantized at load.
  WeightFormat weights;
};

class ModelWorker {
 public:
  // Sizes the KV cache and the token budget from options.budget; refuses a budget that cannot
  // hold the model's context or one request of it.
  static absl::StatusOr<std::unique_ptr<ModelWorker>> Create(std::string name,
                                                             std::unique_ptr<Model> model,
                                                             WorkerOptions options,
                                                             ServerMetrics& metrics);
  ~ModelWorker();  // drains, then joins the thread

  // Queues a validated task. INVALID_ARGUMENT or RESOURCE_EXHAUSTED (naming the limit) for a
  // request that can never fit; UNAVAILABLE (retryable) when the queue is full, when the
  // answers not yet sent hold the response budget, when the work queued ahead would make it
  // miss its deadline, or when draining.
  absl::Status Submit(std::shared_ptr<Task> task);
  // Stops accepting work and returns once everything accepted has finished.
  void Drain();
  // Wakes the scheduler: a paused stream's client read, or a call was cancelled. Any thread.
  void Poke();

  const std::string& name() const { return name_; }
  const Model& model() const { return *model_; }
  const WorkerOptions& options() const { return options_; }
  int64_t max_context() const { return model_->config.max_positions; }
  int64_t kv_cache_tokens() const {
    return pool_ ? pool_->total_blocks() * pool_->block_tokens() : 0;
  }

 private:
  ModelWorker(std::string name, std::unique_ptr<Model> model, WorkerOptions options,
              std::unique_ptr<KvBlockPool> pool, ServerMetrics& metrics);

  // Refusals of work that can never fit, counted by budget.
  absl::Status CheckFits(const Task& task, const RequestCost& cost);
  absl::Status Refuse(const char* budget, absl::Status status);
  void Run();
  // What one step runs: unary tasks and new generations taken from the queue, and the tokens
  // of prompts it may feed.
  struct Step {
    std::vector<std::shared_ptr<Task>> tasks;
    int64_t prompt_tokens = 0;
  };
  // Waits for work, then takes from the queue what this step can run: unary tasks within the
  // token and memory budgets, and generations for which there are slots and blocks.
  Step TakeWork();
  bool Runnable(Generation& g) const;
  void StartGeneration(std::shared_ptr<Task> task);
  void RunNextToken(const std::vector<std::shared_ptr<Task>>& tasks);
  void RunScore(const std::vector<std::shared_ptr<Task>>& tasks);
  // Embed tasks: those of token inputs with the same pooling and no per-head contributions
  // share an engine call; the others run alone.
  void RunEmbeds(std::vector<std::shared_ptr<Task>> tasks);
  void RunEmbed(const std::vector<std::shared_ptr<Task>>& tasks);
  // One step for the generations: decode, then up to prompt_tokens of prompt chunks.
  struct FedTokens {
    int64_t prompt_tokens = 0;
    absl::Duration decoding;  // the decode call's time
  };
  FedTokens StepGenerations(int64_t prompt_tokens);
  // Blocks for feeding `tokens` more to g, preempting newer generations when the pool is short;
  // false when it still cannot.
  bool ReserveBlocks(Generation& g, int64_t tokens);
  // Calls `reserve` until it succeeds, preempting paused streams (newest first), then unless
  // paused_only generations newer than g; false when it still fails.
  bool Preempting(Generation& g, bool paused_only, const std::function<bool()>& reserve);
  // Frees a generation's blocks (and an encoder-decoder's encoded source): it is fed again
  // from the start once there is room.
  void Preempt(Generation& g);
  // Encodes a preempted encoder-decoder's source again once the pool has blocks for it.
  absl::Status EncodeAgain(Generation& g);
  // An encoder-decoder's source tokens, and the blocks held for their keys and values.
  int64_t SourceTokens(const Task& task) const;
  int64_t SourceBlocks(const Task& task) const;
  // Feeds tokens to the generations in one engine call, then samples for those fed in full.
  void Feed(const std::vector<Generation*>& batch, const TokenSequences& tokens);
  // Samples from one row of logits, emits the token or finishes; false when finished.
  bool Emit(Generation& generation, const float* logits);
  // Frees a generation's cache and uncounts it, then completes its call: a caller who has seen
  // the end never sees the sequence still held.
  void End(Generation& generation, absl::Status status);
  // Answers tasks after an engine error: validation passed, so it is the server's fault.
  absl::Status EngineFailure(const absl::Status& status) const;
  // An engine failure when the values an answer is made of hold NaN or infinity: never OK.
  absl::Status Finite(const float* values, int64_t count) const;
  void UpdateCacheGauges();

  const std::string name_;
  const std::unique_ptr<Model> model_;
  const WorkerOptions options_;
  const std::unique_ptr<KvBlockPool> pool_;  // null: no layer caches keys
  ServerMetrics& metrics_;
  prometheus::Gauge& queue_length_;
  prometheus::Gauge& active_sequences_;  // generations counted from admission until End
  prometheus::Gauge& paused_streams_;
  prometheus::Gauge& kv_used_;
  prometheus::Gauge& kv_cached_;
  prometheus::Gauge& kv_free_;
  prometheus::Gauge& kv_touched_;
  prometheus::Counter& reused_tokens_;
  prometheus::Counter& preemptions_;
  prometheus::Histogram& step_tokens_;
  const std::vector<int64_t> end_of_text_;

  // std::mutex rather than absl::Mutex: Debian builds abseil without ThreadSanitizer's
  // annotations, so make test-tsan would not see absl::Mutex's ordering.
  std::mutex mutex_;                    // guards what follows
  std::condition_variable work_ready_;  // queue_ grew, a stream drained, or draining_ was set
  std::deque<std::shared_ptr<Task>> queue_;
  int64_t queued_tokens_ = 0;       // input tokens of queue_'s tasks
  std::atomic<int64_t> queued_{0};  // about queue_.size(), read without the lock by the idle spin
  std::atomic<bool> poked_{false};  // a paused stream's client read, or a call was cancelled
  CompletionEstimate completion_;
  bool draining_ = false;
  // Bytes of answers admitted and not yet sent; shared with the tasks, which give theirs back
  // when their call is done.
  const std::shared_ptr<std::atomic<int64_t>> response_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
  std::list<Generation> generations_;  // scheduler thread only; oldest first
  PageWarmer weight_pages_;            // scheduler thread only
  std::thread thread_;
};

}  // namespace attnserve::server
