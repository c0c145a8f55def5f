#include "server/core/scheduler.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace attnserve::server {

namespace {

// The state of a generation that is not paused.
SequenceState Unpaused(const Sequence& g) {
  if (!g.started) return g.preemptions > 0 ? SequenceState::kPreempted : SequenceState::kWaiting;
  return g.unfed() == 1 ? SequenceState::kDecoding : SequenceState::kPrefilling;
}

}  // namespace

const char* SequenceStateName(SequenceState state) {
  switch (state) {
    case SequenceState::kWaiting:
      return "waiting";
    case SequenceState::kPrefilling:
      return "prefilling";
    case SequenceState::kDecoding:
      return "decoding";
    case SequenceState::kPaused:
      return "paused";
    case SequenceState::kPreempted:
      return "preempted";
    case SequenceState::kFinished:
      return "finished";
  }
  return "";
}

int64_t Sequence::held_blocks() const {
  return static_cast<int64_t>((table ? table->blocks().size() : 0) +
                              (source_table ? source_table->blocks().size() : 0));
}

// Below this many tokens an engine call's fixed costs (reading the weights, a thread team's
// start) dominate, and a prompt's chunks would trail the streams it joins.
constexpr int64_t kMinPacedTokens = 32;

Scheduler::Scheduler(SchedulerOptions options, KvCacheManager cache)
    : options_(std::move(options)),
      cache_(std::move(cache)),
      pacing_(options_.prefill_pacing, kMinPacedTokens, options_.prefill_chunk_tokens) {}

absl::StatusOr<std::shared_ptr<Task>> Scheduler::Add(std::shared_ptr<Task> task,
                                                     int64_t max_waiting) {
  std::shared_ptr<Task> pushed_out;
  if (waiting() >= max_waiting) {
    const auto own = waiting_by_client_.find(task->client);
    const int64_t held = own == waiting_by_client_.end() ? 0 : own->second;
    const auto largest =
        std::max_element(waiting_by_client_.begin(), waiting_by_client_.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    if (largest == waiting_by_client_.end() || largest->second <= held + 1) {
      return absl::UnavailableError(
          absl::StrCat(waiting(), " requests queued, its limit; retry later"));
    }
    const std::string client = largest->first;
    auto newest = std::find_if(waiting_.rbegin(), waiting_.rend(),
                               [&](const auto& queued) { return queued->client == client; });
    pushed_out = Unqueue(std::next(newest).base());
  }
  waiting_tokens_ += task->input_tokens;
  ++waiting_by_client_[task->client];
  waiting_.push_back(std::move(task));
  return pushed_out;
}

std::shared_ptr<Task> Scheduler::Unqueue(std::list<std::shared_ptr<Task>>::iterator it) {
  std::shared_ptr<Task> task = std::move(*it);
  waiting_.erase(it);
  waiting_tokens_ -= task->input_tokens;
  const auto client = waiting_by_client_.find(task->client);
  if (--client->second == 0) waiting_by_client_.erase(client);
  return task;
}

void Scheduler::Cancel(const Task& task) {
  const auto waiting = std::find_if(waiting_.begin(), waiting_.end(),
                                    [&](const auto& queued) { return queued.get() == &task; });
  if (waiting != waiting_.end()) {
    cancelled_.push_back(Unqueue(waiting));
    return;
  }
  for (Sequence& g : running_) {
    if (g.task.get() != &task) continue;
    g.cancelled = true;
    if (g.state == SequenceState::kPaused) {  // runnable, so that the next step ends it
      g.state = Unpaused(g);
      --paused_;
    }
  }
}

bool Scheduler::Resume(const Task& task) {
  for (Sequence& g : running_) {
    if (g.task.get() != &task) continue;
    if (g.state != SequenceState::kPaused || task.Unsent() >= options_.max_unsent_events) {
      return false;
    }
    g.state = Unpaused(g);
    --paused_;
    return true;
  }
  return false;
}

int64_t Scheduler::ResumeSent() {
  int64_t resumed = 0;
  for (Sequence& g : running_) {
    if (g.state == SequenceState::kPaused && g.task->Unsent() < options_.max_unsent_events) {
      g.state = Unpaused(g);
      --paused_;
      ++resumed;
    }
  }
  return resumed;
}

absl::Time Scheduler::earliest_deadline() const {
  absl::Time earliest = absl::InfiniteFuture();
  for (const Sequence& g : running_) earliest = std::min(earliest, g.task->deadline);
  return earliest;
}

int64_t Scheduler::SourceTokens(const Task& task) const {
  return options_.takes_sources ? static_cast<int64_t>(task.generate().sources[0].size()) : 0;
}

StepPlan Scheduler::Schedule(absl::Time now) {
  StepPlan plan;
  for (auto& task : cancelled_) {
    plan.ended.emplace_back(std::move(task),
                            absl::CancelledError("the caller cancelled the request"));
  }
  cancelled_.clear();
  Sweep(now, plan);
  plan.paused = paused_;
  bool decoding = false, prompts_waiting = false;
  for (const Sequence& g : running_) {
    if (g.state == SequenceState::kPaused) continue;
    decoding |= g.started && g.unfed() == 1;
    prompts_waiting |= g.unfed() > 1 || !g.started;
  }
  prompts_waiting |= std::any_of(waiting_.begin(), waiting_.end(), [](const auto& task) {
    return task->kind == TaskKind::kGenerate;
  });
  const int64_t budget = decoding ? pacing_.tokens() : options_.step_tokens;
  const int64_t prompt_share = prompts_waiting ? (budget + 1) / 2 : 0;
  TakeWaiting(now, budget - prompt_share, plan);

  // Engine states for generations that have none (new, or preempted), while blocks allow.
  for (Sequence& g : running_) {
    if (!g.started && g.state != SequenceState::kPaused) Start(g, plan);
  }
  // This step's slots, shared out among clients; decoders take one token each, prompts
  // chunks of the step's prompt budget, oldest first. The chunks share one engine call, which
  // computes each padded to the longest: the budget holds padded tokens, as for requests (a
  // 4-token rest and a 60-token chunk would cost 120).
  const int64_t prompt_budget = std::max(budget - plan.unary_tokens, prompt_share);
  EngineCall call;
  for (Sequence* g : ShareSlots(options_.max_batch_size)) {
    if (!g->started) continue;  // preempted while an earlier one reserved
    if (g->unfed() == 1) {
      if (Reserve(*g, 1, plan)) {
        g->feeding = 1;
        plan.decode.push_back({g, {g->tokens.back()}});
      }
      continue;
    }
    const auto chunks = static_cast<int64_t>(plan.prefill.size()) + 1;
    const int64_t chunk = std::min(g->unfed(), prompt_budget / chunks);
    if (chunk == 0 || chunks * std::max(call.time, chunk) > prompt_budget) continue;
    const EngineCall one{.batch = 1,
                         .time = chunk,
                         .cached = g->computed,
                         .source_time = SourceTokens(*g->task),
                         .logits_rows = 1};
    const EngineCall merged = plan.prefill.empty() ? one : Merge(call, one);
    if (!plan.prefill.empty() && options_.activation_bytes(merged) > options_.activation_budget) {
      continue;
    }
    if (!Reserve(*g, chunk, plan)) continue;
    g->feeding = chunk;
    plan.prefill.push_back({g, std::vector<int64_t>(g->tokens.begin() + g->computed,
                                                    g->tokens.begin() + g->computed + chunk)});
    call = merged;
  }
  // Preemptions while reserving may have taken the blocks of sequences picked before.
  const auto drop_preempted = [](std::vector<Feed>& feeds) {
    std::erase_if(feeds, [](const Feed& f) { return !f.sequence->started; });
  };
  drop_preempted(plan.decode);
  drop_preempted(plan.prefill);
  std::erase_if(plan.start, [](const Sequence* g) { return !g->started; });
  for (const Feed& f : plan.decode) f.sequence->state = SequenceState::kDecoding;
  for (const Feed& f : plan.prefill) {
    f.sequence->state = SequenceState::kPrefilling;
    plan.prefill_tokens += static_cast<int64_t>(f.tokens.size());
  }
  other_tokens_ = plan.unary_tokens + (plan.prefill.empty() ? 0 : call.batch * call.time);
  return plan;
}

void Scheduler::Sweep(absl::Time now, StepPlan& plan) {
  for (auto it = running_.begin(); it != running_.end();) {
    Sequence& g = *it;
    absl::Status ended;
    if (g.cancelled) {
      ended = absl::CancelledError("the caller cancelled the request");
    } else if (g.task->expired(now)) {
      ended = absl::DeadlineExceededError("the deadline passed during generation");
    }
    if (ended.ok()) {
      if (g.state != SequenceState::kPaused) g.state = Unpaused(g);
      ++it;
      continue;
    }
    if (g.state == SequenceState::kPaused) --paused_;
    plan.ended.emplace_back(g.task, std::move(ended));
    plan.removed.push_back(g.id);
    Finish(g);
    it = running_.erase(it);
  }
}

void Scheduler::TakeWaiting(absl::Time now, int64_t unary_share, StepPlan& plan) {
  // Generations: blocks for the prompt and its first sampled token, from the free ones and
  // those of paused streams (which give theirs up when asked). Slots: a new generation starts
  // while fewer than max_batch_size run, or while its client runs fewer than its even share.
  int64_t free_blocks = cache_.free_blocks();
  int64_t runnable = 0;
  std::unordered_map<std::string_view, int64_t> runnable_by_client;
  for (const Sequence& g : running_) {
    if (g.state == SequenceState::kPaused) {
      free_blocks += g.held_blocks();
      continue;
    }
    ++runnable;
    ++runnable_by_client[g.task->client];
  }
  int64_t clients = static_cast<int64_t>(runnable_by_client.size());
  for (const auto& task : waiting_) {
    if (task->kind == TaskKind::kGenerate && !runnable_by_client.contains(task->client)) {
      runnable_by_client[task->client] = 0;
      ++clients;
    }
  }
  const int64_t share =
      std::max<int64_t>(1, options_.max_batch_size / std::max<int64_t>(1, clients));

  // Unary requests, FIFO: up to max_batch_size of them, one engine call per kind, within their
  // share of the budget and each call's memory; the first always goes.
  int64_t unary_tasks = 0;
  bool unary_open = true;
  std::map<TaskKind, EngineCall> calls;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Task& task = **it;
    absl::Status ended;
    if (task.expired(now)) {
      ended = absl::DeadlineExceededError(
          "the deadline passed while the request was queued; it was not run");
    }
    bool take = !ended.ok();
    if (!take && task.kind == TaskKind::kGenerate) {
      const int64_t prompt = static_cast<int64_t>(task.generate().sequences[0].size());
      const int64_t blocks = cache_.BlocksFor(prompt + 1) + cache_.BlocksFor(SourceTokens(task));
      int64_t& own = runnable_by_client[task.client];
      take = (runnable < options_.max_batch_size || own < share) && blocks <= free_blocks;
      if (take) {
        ++runnable;
        ++own;
        free_blocks -= blocks;
      }
    } else if (!take && unary_open) {
      const int64_t tokens = task.call.batch * task.call.time;
      const bool first = plan.unary_tokens == 0;
      const EngineCall merged =
          calls.contains(task.kind) ? Merge(calls[task.kind], task.call) : task.call;
      take = first ||
             (unary_tasks < options_.max_batch_size && plan.unary_tokens + tokens <= unary_share &&
              merged.batch * merged.time <= unary_share &&
              options_.activation_bytes(merged) <= options_.activation_budget);
      if (take) {
        ++unary_tasks;
        plan.unary_tokens += tokens;
        calls[task.kind] = merged;
      } else {
        unary_open = false;  // FIFO: nothing overtakes the unary request that waits
      }
    }
    if (!take) {
      ++it;
      continue;
    }
    plan.taken_tokens += task.input_tokens;
    auto next = std::next(it);
    std::shared_ptr<Task> taken = Unqueue(it);
    it = next;
    if (!ended.ok()) {
      plan.ended.emplace_back(std::move(taken), std::move(ended));
    } else if (taken->kind != TaskKind::kGenerate) {
      plan.unary.push_back(std::move(taken));
    } else {
      Sequence& g = running_.emplace_back();
      g.id = next_id_++;
      g.task = std::move(taken);
      g.tokens = g.task->generate().sequences[0];
      g.prompt_tokens = static_cast<int64_t>(g.tokens.size());
      g.table = cache_.NewTable();
      if (options_.takes_sources) g.source_table = cache_.NewCountingTable();
      plan.admitted.push_back(&g);
    }
  }
}

bool Scheduler::Start(Sequence& g, StepPlan& plan) {
  // An encoder-decoder's encoded source holds blocks for as long as the engine keeps it; they
  // may come from paused streams.
  if (g.source_table &&
      !Preempting(
          g, /*paused_only=*/true,
          [&] { return cache_.Reserve(*g.source_table, SourceTokens(*g.task)); }, plan)) {
    return false;
  }
  if (g.computed == 0) {
    g.computed = cache_.ReusePrefix(*g.table, g.tokens);
    plan.reused_tokens += g.computed;
  }
  g.started = true;
  g.state = SequenceState::kPrefilling;
  plan.start.push_back(&g);
  return true;
}

bool Scheduler::Reserve(Sequence& g, int64_t tokens, StepPlan& plan) {
  return Preempting(
      g, /*paused_only=*/false, [&] { return cache_.Reserve(*g.table, g.computed + tokens); },
      plan);
}

bool Scheduler::Preempting(Sequence& g, bool paused_only, const std::function<bool()>& reserve,
                           StepPlan& plan) {
  if (reserve()) return true;
  // Paused streams first (newest first): their clients are not reading anyway. Then
  // generations newer than g: the oldest always progresses, and recomputing the newest costs
  // the least.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (&*it == &g || it->state != SequenceState::kPaused || it->held_blocks() == 0) continue;
    Preempt(*it, plan);
    if (reserve()) return true;
  }
  if (paused_only) return false;
  for (auto it = running_.rbegin(); it != running_.rend() && &*it != &g; ++it) {
    if (it->held_blocks() == 0) continue;
    Preempt(*it, plan);
    if (reserve()) return true;
  }
  return false;
}

void Scheduler::Preempt(Sequence& g, StepPlan& plan) {
  cache_.Free(*g.table);
  if (g.source_table) cache_.Free(*g.source_table);
  g.computed = 0;
  g.feeding = 0;
  if (g.started) plan.dropped.push_back(g.id);
  g.started = false;
  ++g.preemptions;
  if (g.state != SequenceState::kPaused) g.state = SequenceState::kPreempted;
  ++plan.preemptions;
}

void Scheduler::Finish(Sequence& g) {
  cache_.Free(*g.table);
  if (g.source_table) cache_.Free(*g.source_table);
  g.state = SequenceState::kFinished;
}

std::vector<Sequence*> Scheduler::ShareSlots(int64_t slots) const {
  // Round robin over the clients, in the order of their oldest sequence; oldest first within
  // each client. Every client gets an even share of the slots, and what one leaves the others.
  std::vector<std::vector<Sequence*>> queues;
  std::unordered_map<std::string_view, size_t> queue_of;
  for (const Sequence& g : running_) {
    if (!g.started || g.state == SequenceState::kPaused || g.unfed() < 1) continue;
    auto [it, added] = queue_of.try_emplace(g.task->client, queues.size());
    if (added) queues.emplace_back();
    queues[it->second].push_back(const_cast<Sequence*>(&g));
  }
  std::vector<Sequence*> chosen;
  for (size_t round = 0; slots > 0; ++round) {
    bool any = false;
    for (auto& queue : queues) {
      if (round >= queue.size() || slots == 0) continue;
      chosen.push_back(queue[round]);
      --slots;
      any = true;
    }
    if (!any) break;
  }
  // Oldest first, so that reservations preempt in age order.
  std::unordered_map<const Sequence*, int64_t> age;
  int64_t index = 0;
  for (const Sequence& g : running_) age[&g] = index++;
  std::sort(chosen.begin(), chosen.end(),
            [&](const Sequence* a, const Sequence* b) { return age[a] < age[b]; });
  return chosen;
}

std::vector<FinishedGeneration> Scheduler::Update(const StepOutcome& outcome) {
  pacing_.Observe(outcome.decode_time, outcome.other_time, other_tokens_);
  for (Sequence* g : outcome.fed) {
    g->computed += g->feeding;
    g->feeding = 0;
  }
  std::vector<FinishedGeneration> finished;
  for (const Sampled& sampled : outcome.sampled) {
    Sequence& g = *sampled.sequence;
    if (!sampled.end_of_text) g.tokens.push_back(sampled.token);
    if (const std::optional<FinishReason> reason = Ends(g, sampled)) {
      finished.push_back({.id = g.id,
                          .task = g.task,
                          .reason = *reason,
                          .prompt_tokens = g.prompt_tokens,
                          .generated_tokens = g.generated()});
      Finish(g);
    } else if (g.task->Unsent() >= options_.max_unsent_events) {
      // Its client is not reading: no slot and no compute until it does (Resume). Decided
      // here, as the step's events are counted, and undone under the same lock as its client
      // reads, so that neither misses the other.
      g.state = SequenceState::kPaused;
      ++paused_;
    }
  }
  for (Sequence* g : outcome.failed) Finish(*g);
  running_.remove_if([](const Sequence& g) { return g.state == SequenceState::kFinished; });
  return finished;
}

std::optional<FinishReason> Scheduler::Ends(const Sequence& g, const Sampled& sampled) const {
  const GenerateOptions& options = g.task->generate().options;
  if (sampled.end_of_text) return FinishReason::kEndOfText;
  if (sampled.constraint_complete) return FinishReason::kConstraintComplete;
  if (g.generated() >= options.max_tokens) {
    return options.context_limited ? FinishReason::kContextFull : FinishReason::kMaxTokens;
  }
  if (g.generated() >= options.min_tokens) {
    for (const std::string& stop : options.stop) {
      if (sampled.text.ends_with(stop)) return FinishReason::kStopSequence;
    }
  }
  return std::nullopt;
}

}  // namespace attnserve::server
