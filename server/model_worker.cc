#include "server/model_worker.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/model_repository.h"
#include "server/responses.h"
#include "server/sampling.h"

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
    case TaskKind::kGenerate:
      return "Generate";
  }
  return "";
}

int64_t TokenCount(const TokenSequences& sequences) {
  int64_t tokens = 0;
  for (const auto& sequence : sequences) tokens += static_cast<int64_t>(sequence.size());
  return tokens;
}

// The tokens a task puts through the engine before its first answer: what its queue wait is
// estimated from.
int64_t InputTokens(const Task& task) {
  int64_t tokens =
      TokenCount(task.sequences) + TokenCount(task.sources) + TokenCount(task.embed_inputs.tokens);
  for (int64_t length : task.embed_inputs.features.lengths) tokens += length;
  return std::max<int64_t>(tokens, 1);
}

std::string Megabytes(int64_t bytes) {
  return absl::StrCat(bytes / (1 << 20), ".", (bytes % (1 << 20)) * 10 / (1 << 20), " MiB");
}

// When the scheduler has generations but none it can step (all paused), how often it looks at
// them anyway: for expired deadlines, and wake-ups a test's sink does not send.
constexpr absl::Duration kPausedPoll = absl::Milliseconds(20);

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWorker>> ModelWorker::Create(std::string name,
                                                                 std::unique_ptr<Model> model,
                                                                 WorkerOptions options,
                                                                 ServerMetrics& metrics) {
  const ModelConfig& config = model->config;
  // The most tokens one engine call may take: what the activation budget holds for one
  // sequence (the cheapest shape per token), at most the configured figure.
  int64_t fit = 0;
  for (int64_t step = int64_t{1} << 20; step > 0; step /= 2) {
    EngineCall call{.batch = 1, .time = fit + step, .logits_rows = 1};
    if (ActivationBytes(config, call) <= options.budget.activation_bytes) fit += step;
  }
  options.max_batch_tokens = std::min(options.max_batch_tokens, fit);
  options.step_tokens = std::clamp<int64_t>(options.step_tokens, 1, options.max_batch_tokens);
  options.prefill_chunk_tokens =
      std::clamp<int64_t>(options.prefill_chunk_tokens, 1, options.step_tokens);
  const int64_t context = config.token_inputs() ? config.max_positions : 1;
  if (options.max_batch_tokens < context) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model ", name, ": ", options.max_batch_tokens,
        " tokens per engine call are fewer than its context of ", context, "; ",
        fit < context
            ? absl::StrCat("its activation budget of ", Megabytes(options.budget.activation_bytes),
                           " holds ", fit, ": raise --memory_limit_mb")
            : "raise --max_batch_tokens"));
  }
  const ServableModel& servable = *model->servable;
  const std::optional<KvBlockShape> shape = servable.Answers(ModelMethod::kGenerate)
                                                ? servable.CacheShape(options.kv_block_tokens)
                                                : std::nullopt;
  std::unique_ptr<KvBlockPool> pool;
  if (shape) {
    const int64_t blocks = options.budget.kv_cache_bytes / shape->BlockBytes();
    // An encoder-decoder's source and target each take up to the context.
    const int64_t context_blocks =
        shape->BlocksFor(config.max_positions) * (servable.takes_sources() ? 2 : 1);
    if (blocks < context_blocks) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "model ", name, ": its KV cache budget of ", Megabytes(options.budget.kv_cache_bytes),
          " holds ", blocks * shape->block_tokens, " tokens, fewer than the ",
          context_blocks * shape->block_tokens, " of its context; raise --memory_limit_mb"));
    }
    // Prefixes nobody holds are kept in at most a quarter of the pool, so that the pool's
    // resident part follows the work in flight rather than every prefix ever seen.
    auto created = KvBlockPool::Create(*shape, blocks, blocks / 4);
    if (!created.ok()) return created.status();
    pool = *std::move(created);
  }
  return std::unique_ptr<ModelWorker>(
      new ModelWorker(std::move(name), std::move(model), options, std::move(pool), metrics));
}

ModelWorker::ModelWorker(std::string name, std::unique_ptr<Model> model, WorkerOptions options,
                         std::unique_ptr<KvBlockPool> pool, ServerMetrics& metrics)
    : name_(std::move(name)),
      model_(std::move(model)),
      options_(options),
      pool_(std::move(pool)),
      metrics_(metrics),
      queue_length_(metrics.queue_length.Add({{"model", name_}})),
      active_sequences_(metrics.active_sequences.Add({{"model", name_}})),
      paused_streams_(metrics.paused_streams.Add({{"model", name_}})),
      kv_used_(metrics.kv_blocks.Add({{"model", name_}, {"state", "used"}})),
      kv_cached_(metrics.kv_blocks.Add({{"model", name_}, {"state", "cached"}})),
      kv_free_(metrics.kv_blocks.Add({{"model", name_}, {"state", "free"}})),
      kv_touched_(metrics.kv_touched_bytes.Add({{"model", name_}})),
      reused_tokens_(metrics.prefix_reused_tokens.Add({{"model", name_}})),
      preemptions_(metrics.preemptions.Add({{"model", name_}})),
      step_tokens_(metrics.step_tokens.Add({{"model", name_}})),
      end_of_text_(model_->end_of_text),
      // Packed weights sit on huge pages and need no warming; the file's bytes then hold little
      // the engine reads.
      weight_pages_(model_->weights_packed ? FileBytes{} : model_->weight_file),
      thread_([this] { Run(); }) {
  metrics.StartSeries(name_, SupportedMethods(*model_));
  metrics.queue_capacity.Add({{"model", name_}}).Set(static_cast<double>(options_.max_queue_size));
  metrics.max_batch_tokens.Add({{"model", name_}})
      .Set(static_cast<double>(options_.max_batch_tokens));
  UpdateCacheGauges();
}

ModelWorker::~ModelWorker() { Drain(); }

absl::Status ModelWorker::Refuse(const char* budget, absl::Status status) {
  metrics_.refused.Add({{"model", name_}, {"budget", budget}}).Increment();
  return status;
}

absl::Status ModelWorker::CheckFits(const Task& task, const RequestCost& cost) {
  if (cost.response_bytes > options_.max_response_bytes) {
    return Refuse("response_bytes",
                  absl::ResourceExhaustedError(absl::StrCat(
                      "the answer would take up to ", cost.response_bytes,
                      " bytes, over the message limit of ", options_.max_response_bytes,
                      " (--max_message_bytes); ask for fewer sequences, tokens or values")));
  }
  if (task.kind == TaskKind::kGenerate) {
    // An encoder-decoder's source takes blocks too (Generation::source_blocks).
    const int64_t needed =
        pool_ ? (pool_->shape().BlocksFor(cost.context_tokens) + SourceBlocks(task)) *
                    pool_->block_tokens()
              : 0;
    if (needed > kv_cache_tokens()) {
      return Refuse("kv_cache",
                    absl::ResourceExhaustedError(absl::StrCat(
                        "the ", model_->servable->takes_sources() ? "source, prompt" : "prompt",
                        " and max_tokens need ", needed, " tokens of KV cache; model ", name_,
                        " has ", kv_cache_tokens())));
    }
    return absl::OkStatus();
  }
  if (cost.tokens > options_.max_batch_tokens) {
    return Refuse("tokens", absl::InvalidArgumentError(absl::StrCat(
                                "the request has ", cost.tokens, " tokens (", cost.call.batch,
                                " sequences padded to the longest, ", cost.call.time, "); model ",
                                name_, " takes at most ", options_.max_batch_tokens,
                                " per request (--max_batch_tokens); split it")));
  }
  if (cost.activation_bytes > options_.budget.activation_bytes) {
    return Refuse("activation_memory",
                  absl::ResourceExhaustedError(
                      absl::StrCat("the request needs about ", Megabytes(cost.activation_bytes),
                                   " of working memory; model ", name_, " has ",
                                   Megabytes(options_.budget.activation_bytes),
                                   " per engine call; send fewer or shorter sequences")));
  }
  if (cost.response_bytes > options_.budget.response_bytes) {
    return Refuse(
        "response_bytes",
        absl::ResourceExhaustedError(absl::StrCat(
            "the answer would take up to ", Megabytes(cost.response_bytes), "; model ", name_,
            " holds at most ", Megabytes(options_.budget.response_bytes), " of answers")));
  }
  return absl::OkStatus();
}

absl::Status ModelWorker::Submit(std::shared_ptr<Task> task) {
  const RequestCost cost = CostOf(*task, *model_);
  if (auto status = CheckFits(*task, cost); !status.ok()) return status;
  const int64_t tokens = InputTokens(*task);
  task->input_tokens = tokens;
  task->call = cost.call;
  {
    std::lock_guard lock(mutex_);
    if (draining_) return absl::UnavailableError("the server is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue_size) {
      return Refuse("queue", absl::UnavailableError(
                                 absl::StrCat("model ", name_, " has ", queue_.size(),
                                              " requests queued, its limit; retry later")));
    }
    // Answers wait in memory until their client reads them: admitted ones are counted until
    // their call is done.
    const int64_t held = response_bytes_->load();
    if (held > 0 && held + cost.response_bytes > options_.budget.response_bytes) {
      return Refuse(
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
      const auto queued = static_cast<int64_t>(queue_.size());
      const int64_t per_step = std::clamp<int64_t>(
          options_.step_tokens / std::max<int64_t>(tokens, 1), 1, options_.max_batch_size);
      const absl::Time answered =
          completion_.Completion(now, queued, queued_tokens_, tokens, per_step);
      if (answered > limit && now + completion_.Alone(tokens) <= limit) {
        return Refuse("deadline",
                      absl::UnavailableError(absl::StrCat(
                          "model ", name_, " would answer after the request's deadline (", queued,
                          " requests queued, about ",
                          absl::FormatDuration(absl::Trunc(answered - now, absl::Milliseconds(1))),
                          " of work); retry later")));
      }
    }
    response_bytes_->fetch_add(cost.response_bytes);
    task->HoldResponseBytes(response_bytes_, cost.response_bytes);
    queued_tokens_ += tokens;
    queue_.push_back(std::move(task));
    queue_length_.Set(static_cast<double>(queue_.size()));
  }
  // Signalled and counted once the lock is free, so the spinning scheduler does not run into a
  // held mutex: a contended mutex costs it a futex call, and a system call here flushes the TLB
  // right before the engine runs (see DESIGN.md). The signal makes no system call unless the
  // scheduler sleeps. The count may briefly lag behind, or go below zero when the scheduler
  // takes the task first.
  work_ready_.notify_one();
  queued_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

void ModelWorker::Poke() {
  poked_.store(true, std::memory_order_release);
  std::lock_guard lock(mutex_);  // so the scheduler cannot miss it between its check and wait
  work_ready_.notify_one();
}

void ModelWorker::Drain() {
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
  }
  work_ready_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool ModelWorker::Runnable(Generation& g) const {
  return g.task->Unsent() < options_.max_unsent_events;
}

ModelWorker::Step ModelWorker::TakeWork() {
  const bool runnable = std::any_of(generations_.begin(), generations_.end(),
                                    [&](Generation& g) { return Runnable(g); });
  if (!runnable && options_.idle_spin > absl::ZeroDuration()) {
    // Meanwhile, re-cache the weights' page translations, a few pages between looks at the queue.
    constexpr int64_t kPagesPerLook = 32;
    weight_pages_.Restart();
    const absl::Time until = absl::Now() + options_.idle_spin;
    while (queued_.load(std::memory_order_acquire) <= 0 && absl::Now() < until) {
      if (weight_pages_.Step(kPagesPerLook) == 0) __builtin_ia32_pause();
    }
  }
  std::unique_lock lock(mutex_);
  const auto ready = [&] {
    return !queue_.empty() || runnable || draining_ || poked_.exchange(false);
  };
  if (generations_.empty()) {
    work_ready_.wait(lock, ready);
  } else {
    work_ready_.wait_for(lock, absl::ToChronoMicroseconds(kPausedPoll), ready);
  }
  // Nothing decoding: give a lone request a moment's company, so concurrent ones share a batch.
  if (!runnable && !queue_.empty()) {
    const absl::Time deadline = queue_.front()->enqueued + options_.max_queue_delay;
    if (absl::Now() < deadline) {
      work_ready_.wait_until(lock, absl::ToChronoTime(deadline), [&] {
        return static_cast<int64_t>(queue_.size()) >= options_.max_batch_size || draining_;
      });
    }
  }
  // Generation slots: running generations whose clients keep up. Blocks for new prompts: the
  // free ones, and those of paused streams, which give theirs up when asked (ReserveBlocks).
  // The step's token budget: small while generations decode, so that their next token waits
  // for little else. Unary tasks take half of it while prompts wait to be fed, and prompts
  // what the tasks leave, at least that half, so that neither starves the other.
  int64_t slots = options_.max_batch_size;
  int64_t free_blocks = pool_ ? pool_->free_blocks() : 0;
  bool decoding = false, prompts_waiting = false;
  for (Generation& g : generations_) {
    if (!Runnable(g)) {
      free_blocks += g.held_blocks();
      continue;
    }
    --slots;
    decoding |= g.unfed() == 1;
    prompts_waiting |= g.unfed() > 1;
  }
  const int64_t budget = decoding ? options_.prefill_chunk_tokens : options_.step_tokens;
  const int64_t prompt_share = prompts_waiting ? (budget + 1) / 2 : 0;
  // Unary tasks, FIFO: up to max_batch_size of them, one engine call per kind, within their
  // share of the budget (padded tokens: what the engine computes) and each call's memory. The
  // first always goes, so that a large request cannot starve.
  int64_t unary_tokens = 0, unary_tasks = 0;
  bool unary_open = true;
  std::map<TaskKind, EngineCall> calls;
  std::vector<std::shared_ptr<Task>> taken;
  const absl::Time now = absl::Now();
  for (auto it = queue_.begin(); it != queue_.end();) {
    Task& task = **it;
    bool take = task.cancelled.load() || task.expired(now);
    if (!take && task.kind == TaskKind::kGenerate) {
      // The prompt, and the first sampled token after it.
      const int64_t prompt = static_cast<int64_t>(task.sequences[0].size());
      const int64_t blocks = pool_ ? pool_->shape().BlocksFor(prompt + 1) + SourceBlocks(task) : 0;
      take = slots > 0 && blocks <= free_blocks;
      if (take) {
        --slots;
        free_blocks -= blocks;
      }
    } else if (!take && unary_open) {
      const int64_t tokens = task.call.batch * task.call.time;
      const bool first = unary_tokens == 0;
      const EngineCall merged =
          calls.count(task.kind) ? Merge(calls[task.kind], task.call) : task.call;
      const int64_t share = budget - prompt_share;
      take = first || (unary_tasks < options_.max_batch_size && unary_tokens + tokens <= share &&
                       merged.batch * merged.time <= share &&
                       ActivationBytes(model_->config, merged) <= options_.budget.activation_bytes);
      if (take) {
        ++unary_tasks;
        unary_tokens += tokens;
        calls[task.kind] = merged;
      } else {
        unary_open = false;  // FIFO: nothing overtakes the unary task that waits
      }
    }
    if (!take) {
      ++it;
      continue;
    }
    queued_tokens_ -= task.input_tokens;
    taken.push_back(std::move(*it));
    it = queue_.erase(it);
  }
  queue_length_.Set(static_cast<double>(queue_.size()));
  queued_.fetch_sub(static_cast<int64_t>(taken.size()), std::memory_order_relaxed);
  return {std::move(taken), std::max(budget - unary_tokens, prompt_share)};
}

void ModelWorker::Run() {
  omp_set_num_threads(options_.compute_threads);
  while (true) {
    Step step = TakeWork();
    std::vector<std::shared_ptr<Task>>& work = step.tasks;
    {
      std::lock_guard lock(mutex_);
      if (draining_ && work.empty() && queue_.empty() && generations_.empty()) return;
    }
    const absl::Time now = absl::Now();
    int64_t tokens = 0;
    for (const auto& task : work) tokens += task->input_tokens;
    if (tokens > 0) completion_.IterationStarted(now, tokens);
    std::vector<std::shared_ptr<Task>> next_token, score, embed;
    for (auto& task : work) {
      if (task->cancelled.load()) {
        task->Finish(absl::CancelledError("the caller cancelled the request"));
        continue;
      }
      if (task->expired(now)) {
        task->Finish(absl::DeadlineExceededError(
            "the deadline passed while the request was queued; it was not run"));
        continue;
      }
      metrics_.queue_time.Add({{"model", name_}, {"method", MethodName(task->kind)}})
          .Observe(absl::ToDoubleSeconds(now - task->enqueued));
      switch (task->kind) {
        case TaskKind::kNextToken:
          next_token.push_back(std::move(task));
          break;
        case TaskKind::kScore:
          score.push_back(std::move(task));
          break;
        case TaskKind::kEmbed:
          embed.push_back(std::move(task));
          break;
        case TaskKind::kGenerate:
          StartGeneration(std::move(task));
          break;
      }
    }
    if (!next_token.empty()) RunNextToken(next_token);
    if (!score.empty()) RunScore(score);
    if (!embed.empty()) RunEmbeds(std::move(embed));
    // The estimate is of prompt work (requests and prompt chunks); decode steps, bound by
    // reading the weights rather than by tokens, would make it look many times as costly.
    const FedTokens fed = StepGenerations(step.prompt_tokens);
    completion_.IterationEnded(absl::Now() - fed.decoding, tokens + fed.prompt_tokens);
  }
}

absl::Status ModelWorker::Finite(const float* values, int64_t count) const {
  const int64_t bad = FirstNonFinite(values, count);
  if (bad < 0) return absl::OkStatus();
  return EngineFailure(absl::DataLossError(absl::StrCat(
      "the model computed ", std::isnan(values[bad]) ? "NaN" : "infinity",
      " for this input: its weights changed under the server, or the values overflow")));
}

absl::Status ModelWorker::EngineFailure(const absl::Status& status) const {
  std::cerr << "attnserve: model " << name_ << ": engine error on a validated request: " << status
            << "\n";
  return absl::InternalError(absl::StrCat("the engine failed: ", status.message()));
}

void ModelWorker::RunNextToken(const std::vector<std::shared_ptr<Task>>& tasks) {
  // Every sequence of every task, in order, through one engine batch.
  TokenSequences sequences, sources;
  for (const auto& task : tasks) {
    sequences.insert(sequences.end(), task->sequences.begin(), task->sequences.end());
    sources.insert(sources.end(), task->sources.begin(), task->sources.end());
  }
  const int64_t prompt_tokens = TokenCount(sequences);
  absl::StatusOr<Tensor> logits = model_->servable->NextTokenLogits(sources, sequences);
  metrics_.batch_size.Add({{"model", name_}, {"method", "NextToken"}})
      .Observe(static_cast<double>(sequences.size()));
  metrics_.tokens.Add({{"model", name_}, {"kind", "prompt"}}).Increment(prompt_tokens);
  step_tokens_.Observe(static_cast<double>(prompt_tokens));
  if (!logits.ok()) {
    for (const auto& task : tasks) task->Finish(EngineFailure(logits.status()));
    return;
  }
  int64_t row = 0;
  for (const auto& task : tasks) {
    const auto rows = static_cast<int64_t>(task->sequences.size());
    if (absl::Status finite = Finite(logits->row(row), rows * logits->dim(1)); !finite.ok()) {
      row += rows;
      task->Finish(std::move(finite));
      continue;
    }
    v1::NextTokenResponse response;
    response.set_model(name_);
    for (const auto& ids : task->sequences) {
      AddNextTokenResult(logits->row(row++), logits->dim(1), static_cast<int64_t>(ids.size()),
                         *task, *model_->tokenizer, response);
    }
    task->next_token = std::move(response);
    task->Finish(absl::OkStatus());
  }
}

void ModelWorker::RunScore(const std::vector<std::shared_ptr<Task>>& tasks) {
  TokenSequences sequences, sources;
  for (const auto& task : tasks) {
    sequences.push_back(task->sequences[0]);
    sources.insert(sources.end(), task->sources.begin(), task->sources.end());
  }
  auto logits = model_->servable->Logits(sources, sequences);
  metrics_.batch_size.Add({{"model", name_}, {"method", "Score"}})
      .Observe(static_cast<double>(sequences.size()));
  step_tokens_.Observe(static_cast<double>(TokenCount(sequences)));
  if (!logits.ok()) {
    for (const auto& task : tasks) task->Finish(EngineFailure(logits.status()));
    return;
  }
  for (size_t b = 0; b < tasks.size(); ++b) {
    metrics_.tokens.Add({{"model", name_}, {"kind", "prompt"}}).Increment(sequences[b].size());
    const Tensor scores = logits->Select(static_cast<int64_t>(b));
    if (absl::Status finite =
            Finite(scores.data(), static_cast<int64_t>(sequences[b].size()) * scores.dim(1));
        !finite.ok()) {
      tasks[b]->Finish(std::move(finite));
      continue;
    }
    tasks[b]->score = MakeScoreResponse(scores, sequences[b], *model_->tokenizer);
    tasks[b]->score.set_model(name_);
    tasks[b]->Finish(absl::OkStatus());
  }
}

void ModelWorker::RunEmbeds(std::vector<std::shared_ptr<Task>> tasks) {
  std::map<std::optional<Pooling>, std::vector<std::shared_ptr<Task>>> shared;
  for (auto& task : tasks) {
    if (model_->config.token_inputs() && task->head_layers.empty()) {
      shared[task->pooling].push_back(std::move(task));
    } else {
      RunEmbed({std::move(task)});
    }
  }
  for (const auto& [pooling, group] : shared) RunEmbed(group);
}

void ModelWorker::RunEmbed(const std::vector<std::shared_ptr<Task>>& tasks) {
  const bool tokens = model_->config.token_inputs();
  const auto sequences = [&](const Task& task) {
    const ModelInputs& inputs = task.embed_inputs;
    return tokens ? static_cast<int64_t>(inputs.tokens.size()) : inputs.features.batch();
  };
  ModelInputs merged;
  for (const auto& task : tasks) {
    if (tasks.size() == 1) break;
    const TokenSequences& own = task->embed_inputs.tokens;
    merged.tokens.insert(merged.tokens.end(), own.begin(), own.end());
  }
  const ModelInputs& inputs = tasks.size() == 1 ? tasks[0]->embed_inputs : merged;
  int64_t batch = 0, input_tokens = 0;
  for (const auto& task : tasks) {
    batch += sequences(*task);
    input_tokens += task->input_tokens;
  }
  metrics_.batch_size.Add({{"model", name_}, {"method", "Embed"}})
      .Observe(static_cast<double>(batch));
  step_tokens_.Observe(static_cast<double>(input_tokens));
  auto output = model_->servable->Embed(inputs, tasks[0]->pooling, tasks[0]->head_layers);
  if (!output.ok()) {
    for (const auto& task : tasks) task->Finish(EngineFailure(output.status()));
    return;
  }
  // Each task's sequences, in order.
  int64_t first = 0;
  for (const auto& task : tasks) {
    const int64_t count = sequences(*task);
    const Tensor values = output->values.Slice(0, first, count);
    const auto part = [&](const std::vector<int64_t>& all) {
      return all.empty() ? all
                         : std::vector<int64_t>(all.begin() + first, all.begin() + first + count);
    };
    const std::vector<int64_t> rows = part(output->rows), lengths = part(output->lengths);
    first += count;
    absl::Status finite = absl::OkStatus();
    for (int64_t b = 0; b < count && finite.ok(); ++b) {
      const Tensor sequence = values.Select(b);
      finite = Finite(sequence.data(), rows[b] * sequence.dim(1));
    }
    if (!finite.ok()) {
      task->Finish(std::move(finite));
      continue;
    }
    task->embed = MakeEmbedResponse(values, rows, task->normalize, output->contributions, lengths);
    task->embed.set_model(name_);
    task->Finish(absl::OkStatus());
  }
}

void ModelWorker::StartGeneration(std::shared_ptr<Task> task) {
  Generation g(task, *model_->tokenizer);
  const bool sources = model_->servable->takes_sources();
  auto state =
      model_->servable->Start(sources ? task->sources[0] : std::vector<int64_t>(), pool_.get());
  if (!state.ok()) {
    task->Finish(EngineFailure(state.status()));
    return;
  }
  g.state = *std::move(state);
  if (sources && pool_) g.source_blocks = std::make_unique<BlockTable>(pool_.get(), false);
  // Only a causal LM's blocks are shared: an encoder-decoder's depend on its source.
  reused_tokens_.Increment(static_cast<double>(g.decoder().ReusePrefix(g.tokens)));
  metrics_.tokens.Add({{"model", name_}, {"kind", "prompt"}}).Increment(g.prompt_tokens);
  // Counted before the first token goes out: a caller who has seen one sees its sequence counted.
  active_sequences_.Increment();
  generations_.push_back(std::move(g));
  Generation& added = generations_.back();
  // Counted when taken, the source's blocks may have to come from paused streams.
  if (added.source_blocks && !Preempting(added, /*paused_only=*/true, [&] {
        return added.source_blocks->Reserve(SourceTokens(*added.task));
      })) {
    Preempt(added);
  }
}

void ModelWorker::Preempt(Generation& g) {
  g.decoder().Reset();
  if (g.source_blocks) {
    g.state->DropSource();
    g.source_blocks->Clear();
  }
  preemptions_.Increment();
}

absl::Status ModelWorker::EncodeAgain(Generation& g) {
  if (!g.source_dropped() || pool_->free_blocks() < SourceBlocks(*g.task)) {
    return absl::OkStatus();
  }
  auto state = model_->servable->Start(g.task->sources[0], pool_.get());
  if (!state.ok()) return EngineFailure(state.status());
  g.state = *std::move(state);
  g.source_blocks->Reserve(SourceTokens(*g.task));  // the free blocks were counted
  return absl::OkStatus();
}

int64_t ModelWorker::SourceTokens(const Task& task) const {
  return model_->servable->takes_sources() ? static_cast<int64_t>(task.sources[0].size()) : 0;
}

int64_t ModelWorker::SourceBlocks(const Task& task) const {
  return pool_ ? pool_->shape().BlocksFor(SourceTokens(task)) : 0;
}

bool ModelWorker::ReserveBlocks(Generation& g, int64_t tokens) {
  DecoderState& decoder = g.decoder();
  const int64_t total = decoder.position + tokens;
  return Preempting(g, /*paused_only=*/false, [&] { return decoder.table.Reserve(total); });
}

bool ModelWorker::Preempting(Generation& g, bool paused_only,
                             const std::function<bool()>& reserve) {
  if (reserve()) return true;
  // Take the blocks of paused streams (newest first), whose clients are not reading anyway,
  // then those of generations newer than g: the oldest always progresses, and recomputing
  // the newest costs the least.
  for (auto it = generations_.rbegin(); it != generations_.rend(); ++it) {
    if (&*it == &g || Runnable(*it) || it->held_blocks() == 0) continue;
    Preempt(*it);
    if (reserve()) return true;
  }
  if (paused_only) return false;
  for (auto it = generations_.rbegin(); it != generations_.rend() && &*it != &g; ++it) {
    if (it->held_blocks() == 0) continue;
    Preempt(*it);
    if (reserve()) return true;
  }
  return false;
}

ModelWorker::FedTokens ModelWorker::StepGenerations(int64_t prompt_tokens) {
  const absl::Time now = absl::Now();
  int64_t paused = 0;
  for (auto it = generations_.begin(); it != generations_.end();) {
    if (it->task->cancelled.load()) {
      End(*it, absl::CancelledError("the caller cancelled the request"));
    } else if (it->task->expired(now)) {
      End(*it, absl::DeadlineExceededError("the deadline passed during generation"));
    } else if (absl::Status encoded = Runnable(*it) ? EncodeAgain(*it) : absl::OkStatus();
               !encoded.ok()) {
      End(*it, std::move(encoded));
    } else {
      paused += Runnable(*it) ? 0 : 1;
      ++it;
      continue;
    }
    it = generations_.erase(it);
  }
  paused_streams_.Set(static_cast<double>(paused));
  // Oldest first: decoding generations take one token each, up to max_batch_size; prompts
  // take chunks of the step's prompt budget.
  std::vector<Generation*> decode, prefill;
  TokenSequences decode_tokens, prefill_tokens;
  int64_t slots = options_.max_batch_size;
  for (Generation& g : generations_) {
    if (slots == 0) break;
    if (!Runnable(g) || g.source_dropped()) continue;
    if (g.unfed() == 1 && ReserveBlocks(g, 1)) {
      decode.push_back(&g);
      decode_tokens.push_back({g.tokens.back()});
      --slots;
    }
  }
  int64_t budget = prompt_tokens;
  EngineCall call;
  for (Generation& g : generations_) {
    if (slots == 0 || budget == 0) break;
    if (!Runnable(g) || g.source_dropped() || g.unfed() <= 1) continue;
    const int64_t chunk = std::min(g.unfed(), budget);
    const EngineCall one{.batch = 1,
                         .time = chunk,
                         .cached = g.decoder().position,
                         .source_time = SourceTokens(*g.task),
                         .logits_rows = 1};
    const EngineCall merged = prefill.empty() ? one : Merge(call, one);
    if (!prefill.empty() &&
        ActivationBytes(model_->config, merged) > options_.budget.activation_bytes) {
      break;
    }
    if (!ReserveBlocks(g, chunk)) continue;
    const int64_t start = g.decoder().position;
    prefill.push_back(&g);
    prefill_tokens.emplace_back(g.tokens.begin() + start, g.tokens.begin() + start + chunk);
    call = merged;
    budget -= chunk;
    --slots;
  }
  // Preemptions while reserving may have reset generations picked before: feed those again
  // from the start next step.
  const auto drop_reset = [](std::vector<Generation*>& batch, TokenSequences& tokens) {
    for (size_t i = batch.size(); i-- > 0;) {
      DecoderState& d = batch[i]->decoder();
      if (d.table.capacity() < d.position + static_cast<int64_t>(tokens[i].size())) {
        batch.erase(batch.begin() + static_cast<int64_t>(i));
        tokens.erase(tokens.begin() + static_cast<int64_t>(i));
      }
    }
  };
  drop_reset(decode, decode_tokens);
  drop_reset(prefill, prefill_tokens);
  FedTokens fed;
  if (!decode.empty()) {
    const absl::Time start = absl::Now();
    Feed(decode, decode_tokens);
    fed.decoding = absl::Now() - start;
  }
  if (!prefill.empty()) Feed(prefill, prefill_tokens);
  fed.prompt_tokens = TokenCount(prefill_tokens);
  generations_.remove_if([](const Generation& g) { return g.task == nullptr; });
  UpdateCacheGauges();
  return fed;
}

void ModelWorker::Feed(const std::vector<Generation*>& batch, const TokenSequences& tokens) {
  step_tokens_.Observe(static_cast<double>(TokenCount(tokens)));
  metrics_.batch_size.Add({{"model", name_}, {"method", "Generate"}})
      .Observe(static_cast<double>(batch.size()));
  std::vector<GenerationState*> states;
  for (Generation* g : batch) states.push_back(g->state.get());
  const absl::StatusOr<Tensor> logits = model_->servable->Advance(states, tokens);
  for (size_t i = 0; i < batch.size(); ++i) {
    Generation& g = *batch[i];
    if (!logits.ok()) {
      End(g, EngineFailure(logits.status()));
    } else if (g.unfed() > 0) {
      continue;  // a chunk of its prompt fed
    } else if (absl::Status finite = Finite(logits->row(static_cast<int64_t>(i)), logits->dim(1));
               !finite.ok()) {
      End(g, std::move(finite));
    } else if (Emit(g, logits->row(static_cast<int64_t>(i)))) {
      continue;  // a token sent: still running
    }
    g.task = nullptr;  // ended: removed after the step
  }
}

void ModelWorker::End(Generation& g, absl::Status status) {
  g.state.reset();
  active_sequences_.Decrement();
  g.task->Finish(std::move(status));
}

bool ModelWorker::Emit(Generation& g, const float* logits) {
  const int64_t vocab = model_->config.vocab_size;
  const int64_t id = Sample(logits, vocab, g.task->generate, g.rng);
  if (g.generated == 0) {
    metrics_.first_token.Add({{"model", name_}})
        .Observe(absl::ToDoubleSeconds(absl::Now() - g.task->enqueued));
  }
  auto finish = [&](v1::FinishReason reason) {
    v1::GenerateResponse event;
    event.mutable_finish()->set_reason(reason);
    event.mutable_finish()->set_prompt_tokens(g.prompt_tokens);
    event.mutable_finish()->set_generated_tokens(g.generated);
    event.mutable_finish()->set_text(g.text.Finish());
    g.task->Emit(std::move(event));
    End(g, absl::OkStatus());
    return false;
  };
  if (std::find(end_of_text_.begin(), end_of_text_.end(), id) != end_of_text_.end()) {
    return finish(v1::FINISH_REASON_END_OF_TEXT);
  }
  ++g.generated;
  metrics_.tokens.Add({{"model", name_}, {"kind", "generated"}}).Increment();
  v1::GenerateResponse event;
  event.mutable_token()->set_id(id);
  event.mutable_token()->set_text(g.text.Push(id));
  event.mutable_token()->set_log_probability(logits[id] - LogSumExp(logits, vocab));
  g.task->Emit(std::move(event));
  if (g.generated >= g.task->generate.max_tokens) {
    return finish(g.task->generate.context_limited ? v1::FINISH_REASON_CONTEXT_FULL
                                                   : v1::FINISH_REASON_MAX_TOKENS);
  }
  for (const std::string& stop : g.task->generate.stop) {
    if (absl::EndsWith(g.text.text(), stop)) return finish(v1::FINISH_REASON_STOP_SEQUENCE);
  }
  g.tokens.push_back(id);
  return true;
}

void ModelWorker::UpdateCacheGauges() {
  if (!pool_) return;
  kv_used_.Set(static_cast<double>(pool_->used_blocks()));
  kv_cached_.Set(static_cast<double>(pool_->cached_blocks()));
  kv_free_.Set(static_cast<double>(pool_->free_blocks() - pool_->cached_blocks()));
  kv_touched_.Set(static_cast<double>(pool_->touched_blocks() * pool_->shape().BlockBytes()));
}

}  // namespace attnserve::server
