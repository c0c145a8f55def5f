#include "server/core/engine_loop.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/core/call_gate.h"
#include "server/core/model_methods.h"

namespace attnserve::server {
namespace {

const char* MethodName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kNextToken:
      return "NextToken";
    case TaskKind::kScore:
      return "Score";
    case TaskKind::kEmbed:
      return "Embed";
    case TaskKind::kClassify:
      return "Classify";
    case TaskKind::kGenerate:
      return "Generate";
  }
  return "";
}

// The tokens a task puts through the engine before its first answer: what its queue wait is
// estimated from.
int64_t InputTokens(const Task& task) {
  int64_t tokens = 0;
  switch (task.kind) {
    case TaskKind::kNextToken:
      tokens = TokenCount(task.next_token().sequences) + TokenCount(task.next_token().sources);
      break;
    case TaskKind::kScore:
      tokens = TokenCount(task.score().sequences) + TokenCount(task.score().sources);
      break;
    case TaskKind::kEmbed:
      tokens = TokenCount(task.embed().inputs.tokens);
      for (int64_t length : task.embed().inputs.features.lengths) tokens += length;
      break;
    case TaskKind::kClassify:
      tokens = TokenCount(task.classify().inputs.tokens);
      break;
    case TaskKind::kGenerate:
      tokens = TokenCount(task.generate().sequences) + TokenCount(task.generate().sources);
      break;
  }
  return std::max<int64_t>(tokens, 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<EngineLoop>> EngineLoop::Create(std::string name,
                                                               std::unique_ptr<Model> model,
                                                               EngineLoopOptions options,
                                                               ServerMetrics& metrics) {
  ASSIGN_OR_RETURN(EngineSizing sized, SizeEngine(name, *model, std::move(options)));
  return std::unique_ptr<EngineLoop>(new EngineLoop(std::move(name), std::move(model),
                                                    sized.options, std::move(sized.pool), metrics));
}

EngineLoop::EngineLoop(std::string name, std::unique_ptr<Model> model, EngineLoopOptions options,
                       std::unique_ptr<KvBlockPool> pool, ServerMetrics& metrics)
    : name_(std::move(name)),
      model_(std::move(model)),
      options_(options),
      kv_cache_tokens_(pool ? pool->total_blocks() * pool->block_tokens() : 0),
      kv_block_shape_(pool ? pool->shape() : KvBlockShape{}),
      metrics_(metrics),
      gauges_(name_, metrics),
      limits_(name_, *model_, options_, kv_cache_tokens_, kv_block_shape_, metrics),
      constraints_(name_, *model_, {.max_bytes = options_.max_text_bytes, .cached = 64}),
      scheduler_(
          SchedulerOptions{
              .max_batch_size = options_.max_batch_size,
              .step_tokens = options_.step_tokens,
              .prefill_chunk_tokens = options_.prefill_chunk_tokens,
              .prefill_pacing = options_.prefill_pacing,
              .max_unsent_events = options_.max_unsent_events,
              .activation_budget = options_.budget.activation_bytes,
              .activation_bytes =
                  [config = &model_->config](const EngineCall& call) {
                    return ActivationBytes(*config, call);
                  },
              .takes_sources = model_->servable->takes_sources(),
          },
          KvCacheManager(std::move(pool), model_->servable->SharesCachePrefixes())),
      executor_(name_, *model_, metrics),
      // Packed weights sit on huge pages and need no warming; the file's bytes then hold little
      // the engine reads.
      weight_pages_(model_->weights_packed ? FileBytes{} : model_->weight_file),
      thread_([this] { Run(); }) {
  metrics.StartSeries(name_, SupportedMethods(*model_));
  metrics.queue_capacity.Add({{"model", name_}}).Set(static_cast<double>(options_.max_queue_size));
  metrics.max_batch_tokens.Add({{"model", name_}})
      .Set(static_cast<double>(options_.max_batch_tokens));
  gauges_.Update(scheduler_, StepPlan{});
}

EngineLoop::~EngineLoop() { Drain(); }

absl::Status EngineLoop::Submit(std::shared_ptr<Task> task) {
  const RequestCost cost = CostOf(*task, *model_);
  RETURN_IF_ERROR(limits_.CheckFits(*task, cost));
  const int64_t tokens = InputTokens(*task);
  task->input_tokens = tokens;
  task->call = cost.call;
  std::shared_ptr<Task> pushed_out;
  {
    std::lock_guard lock(mutex_);
    if (draining_) return ShuttingDownError();
    if (task->cancelled.load()) return absl::CancelledError("the caller cancelled the request");
    const int64_t queued = scheduler_.waiting();
    // Answers wait in memory until their client reads them: admitted ones are counted until
    // their call is done.
    const int64_t held = response_bytes_->load();
    if (held > 0 && held + cost.response_bytes > options_.budget.response_bytes) {
      return limits_.Refuse(
          "response_bytes",
          absl::UnavailableError(absl::StrCat(
              "model ", name_, " holds ", Megabytes(held), " of answers not yet sent, ",
              "its limit is ", Megabytes(options_.budget.response_bytes), "; retry later")));
    }
    // A request the queue ahead of it would make miss its deadline is refused now, while the
    // caller can still retry elsewhere, rather than failing late. The estimate may use 80% of
    // the time left: it comes from past batches, and CPU contention and sending the answers add
    // to it (7% late at ten times capacity on these machines, tests/e2e/overload_test.py). A
    // request that would miss its deadline even alone is left to it: a retry would not help.
    if (task->deadline != absl::InfiniteFuture()) {
      const absl::Time now = absl::Now();
      const absl::Time limit = now + 0.8 * (task->deadline - now);
      const int64_t per_step = std::clamp<int64_t>(
          options_.step_tokens / std::max<int64_t>(tokens, 1), 1, options_.max_batch_size);
      const absl::Time answered =
          completion_.Completion(now, queued, scheduler_.waiting_tokens(), tokens, per_step);
      if (answered > limit && now + completion_.Alone(tokens) <= limit) {
        return limits_.Refuse(
            "deadline",
            absl::UnavailableError(absl::StrCat(
                "model ", name_, " would answer after the request's deadline (", queued,
                " requests queued, about ",
                absl::FormatDuration(absl::Trunc(answered - now, absl::Milliseconds(1))),
                " of work); retry later")));
      }
    }
    // The scheduler's queue is the only one: a full queue makes room for a client with fewer
    // requests queued than another (Scheduler::Add).
    auto added = scheduler_.Add(task, options_.max_queue_size);
    if (!added.ok()) {
      return limits_.Refuse("queue", absl::UnavailableError(absl::StrCat(
                                         "model ", name_, " has ", added.status().message())));
    }
    pushed_out = *std::move(added);
    response_bytes_->fetch_add(cost.response_bytes);
    task->response_bytes = HeldBytes(response_bytes_, cost.response_bytes);
    gauges_.QueueLength(scheduler_.waiting());
  }
  // Signalled and counted once the lock is free, so the spinning loop does not run into a held
  // mutex: a contended mutex costs it a futex call, and a system call here flushes the TLB right
  // before the engine runs (docs/serving.md). The signal makes no system call unless the loop
  // sleeps.
  work_ready_.notify_one();
  arrivals_.fetch_add(1, std::memory_order_release);
  if (pushed_out) {
    limits_.Count("queue");
    StepAnswers refused;
    refused.End(std::move(pushed_out),
                absl::UnavailableError(
                    "the queue is full, and this request's place went to a client with fewer "
                    "requests queued; retry later"));
    Deliver(std::move(refused));
  }
  return absl::OkStatus();
}

void EngineLoop::Cancel(const Task& task) {
  {
    std::lock_guard lock(mutex_);
    scheduler_.Cancel(task);
  }
  work_ready_.notify_one();
}

void EngineLoop::Resume(const Task& task) {
  bool resumed;
  {
    std::lock_guard lock(mutex_);
    resumed = scheduler_.Resume(task);
  }
  if (resumed) work_ready_.notify_one();
}

void EngineLoop::Drain() {
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
  }
  work_ready_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool EngineLoop::AwaitWork(std::unique_lock<std::mutex>& lock) {
  // Only this thread adds and removes running generations (Schedule and Update); Resume
  // unpauses them, under the lock.
  const bool runnable = scheduler_.HasRunnable();
  if (!runnable && !scheduler_.has_waiting() && options_.idle_spin > absl::ZeroDuration()) {
    // Nothing to do: poll for a while with the lock free for Submit, and meanwhile re-cache the
    // weights' page translations, a few pages between looks.
    constexpr int64_t kPagesPerLook = 32;
    const int64_t arrivals = arrivals_.load(std::memory_order_acquire);
    lock.unlock();
    weight_pages_.Restart();
    const absl::Time until = absl::Now() + options_.idle_spin;
    while (arrivals_.load(std::memory_order_acquire) == arrivals && absl::Now() < until) {
      if (weight_pages_.Step(kPagesPerLook) == 0) __builtin_ia32_pause();
    }
    lock.lock();
  }
  const auto ready = [&] {
    return scheduler_.has_waiting() || scheduler_.HasRunnable() || draining_;
  };
  // Every stream paused: nothing to do until one resumes, or the first deadline passes. A stream
  // paused while the answer writer still held its events runs again once the writer delivered
  // them; the writer cannot resume it (the loop may be gone by then), so while it holds answers
  // the loop looks every millisecond, and once more after. A stream paused because its client
  // does not read waits for the client's Resume.
  const absl::Time deadline = scheduler_.earliest_deadline();
  while (!ready()) {
    if (scheduler_.paused() > 0 && scheduler_.ResumeSent() > 0) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    const bool writer_holds_answers =
        scheduler_.paused() > 0 && handed_over_->load(std::memory_order_acquire) > 0;
    const absl::Time wake =
        writer_holds_answers ? std::min(deadline, now + absl::Milliseconds(1)) : deadline;
    if (wake == absl::InfiniteFuture()) {
      work_ready_.wait(lock);
    } else {
      work_ready_.wait_until(lock, absl::ToChronoTime(wake));
    }
  }
  // Nothing decoding: give a lone request a moment's company, so concurrent ones share a batch.
  if (!runnable && scheduler_.waiting() > 0) {
    const absl::Time deadline = scheduler_.oldest_waiting()->enqueued + options_.max_queue_delay;
    if (absl::Now() < deadline) {
      work_ready_.wait_until(lock, absl::ToChronoTime(deadline), [&] {
        return scheduler_.waiting() >= options_.max_batch_size || draining_;
      });
    }
  }
  return !(draining_ && scheduler_.idle());
}

void EngineLoop::Run() {
  // "attn:<model>" in top -H and perf (a thread's name holds 15 bytes).
  pthread_setname_np(pthread_self(), absl::StrCat("attn:", name_).substr(0, 15).c_str());
  omp_set_num_threads(options_.compute_threads);
  // Submit and Cancel reach the scheduler under the lock; this thread holds it from the end of
  // one step's engine calls to the start of the next's, taking it once a step: each time it
  // waits for a lock a caller holds costs a futex call, and on two CPUs sometimes the rest of
  // the holder's time slice.
  std::unique_lock lock(mutex_);
  while (AwaitWork(lock)) {
    const absl::Time now = absl::Now();
    StepPlan plan = scheduler_.Schedule(now);
    // Counted before the first token goes out: a caller who has seen one sees its sequence
    // counted.
    gauges_.Update(scheduler_, plan);
    lock.unlock();
    if (plan.taken_tokens > 0) completion_.IterationStarted(now, plan.taken_tokens);
    for (const auto& task : plan.unary) {
      metrics_.queue_time.Add({{"model", name_}, {"method", MethodName(task->kind)}})
          .Observe(absl::ToDoubleSeconds(now - task->enqueued));
    }
    for (const Sequence* g : plan.admitted) {
      metrics_.queue_time.Add({{"model", name_}, {"method", "Generate"}})
          .Observe(absl::ToDoubleSeconds(now - g->task->enqueued));
    }
    if (!plan.ended.empty()) {
      StepAnswers ended;
      for (auto& [task, status] : plan.ended) ended.End(std::move(task), std::move(status));
      Deliver(std::move(ended));
    }
    Executor::Result result = executor_.Run(plan);
    // The estimate is of prompt work (requests and prompt chunks); decode steps, bound by
    // reading the weights rather than by tokens, would make it look many times as costly.
    completion_.IterationEnded(absl::Now() - result.outcome.decode_time,
                               plan.taken_tokens + plan.prefill_tokens);
    lock.lock();
    // The scheduler frees what ended before its callers hear of it: a caller who has seen the
    // end never sees its sequence still held.
    executor_.Finish(scheduler_.Update(result.outcome), result.answers);
    gauges_.Update(scheduler_, StepPlan{});
    if (HandsOver(result.answers)) {
      Deliver(std::move(result.answers), /*hand_over=*/true);  // no sink runs under the lock
    } else {
      lock.unlock();
      Deliver(std::move(result.answers), /*hand_over=*/false);
      lock.lock();
    }
  }
}

bool EngineLoop::HandsOver(const StepAnswers& answers) const {
  // A few answers are delivered here when nothing handed over is still undelivered (so that no
  // task's answers overtake each other): a lone stream's token would wait longer for the
  // writer's thread to wake than its encoding takes.
  constexpr int64_t kInlineAnswers = 4;
  return options_.answers != nullptr &&
         (answers.size() > kInlineAnswers || handed_over_->load(std::memory_order_acquire) > 0);
}

void EngineLoop::Deliver(StepAnswers answers) {
  const bool hand_over = HandsOver(answers);
  Deliver(std::move(answers), hand_over);
}

void EngineLoop::Deliver(StepAnswers answers, bool hand_over) {
  if (answers.empty()) return;
  if (!hand_over) return answers.Deliver();
  handed_over_->fetch_add(1, std::memory_order_relaxed);
  // The count, not the loop: the loop may be gone once the last answer is out.
  options_.answers->Post([handed_over = handed_over_, answers = std::move(answers)]() mutable {
    answers.Deliver();
    handed_over->fetch_sub(1, std::memory_order_release);
  });
}

}  // namespace attnserve::server
