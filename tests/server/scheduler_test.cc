// The scheduler's policies without threads or a model: requests in, plans out, results back,
// with a stand-in executor that "computes" what each plan feeds (committing the tokens to the
// block tables, as the engine does) and samples tokens from a seeded generator.
#include "server/core/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace attnserve::server {
namespace {

class FakeSink final : public TaskSink {
 public:
  void Send(GenerationEvent) override {}
  void Complete(absl::Status status) override { statuses.push_back(std::move(status)); }
  int64_t Unsent() const override { return unsent; }
  int64_t unsent = 0;
  std::vector<absl::Status> statuses;
};

constexpr int64_t kBlockTokens = 4;

struct Harness {
  explicit Harness(SchedulerOptions options, int64_t blocks = 64, bool share = true)
      : scheduler(options,
                  KvCacheManager(*KvBlockPool::Create(KvBlockShape{.layers = 1,
                                                                   .key_width = 1,
                                                                   .value_width = 1,
                                                                   .block_tokens = kBlockTokens},
                                                      blocks),
                                 share)) {}

  std::shared_ptr<Task> Generate(std::vector<int64_t> prompt, int64_t max_tokens,
                                 std::string client = "a") {
    sinks.push_back(std::make_unique<FakeSink>());
    auto task = std::make_shared<Task>(TaskKind::kGenerate, sinks.back().get());
    task->generate().sequences = {std::move(prompt)};
    task->generate().options.max_tokens = max_tokens;
    task->input_tokens = static_cast<int64_t>(task->generate().sequences[0].size());
    task->client = std::move(client);
    EXPECT_TRUE(scheduler.Add(task).ok());
    tasks.push_back(task);
    return task;
  }
  std::shared_ptr<Task> Unary(TaskKind kind, int64_t batch, int64_t time) {
    sinks.push_back(std::make_unique<FakeSink>());
    auto task = std::make_shared<Task>(kind, sinks.back().get());
    task->call = EngineCall{.batch = batch, .time = time, .logits_rows = batch};
    task->input_tokens = batch * time;
    EXPECT_TRUE(scheduler.Add(task).ok());
    tasks.push_back(task);
    return task;
  }
  // The client of the i-th request stops reading (`unsent` events unsent), or reads again (0).
  void Unsent(size_t i, int64_t unsent) {
    sinks[i]->unsent = unsent;
    if (unsent == 0) scheduler.Resume(*tasks[i]);
  }
  // Runs a plan as the executor would: every feed is computed, and a sequence fed in full
  // samples a token.
  StepOutcome Execute(const StepPlan& plan) {
    StepOutcome outcome;
    for (const auto& [task, status] : plan.ended) task->Finish(status);
    for (const auto& task : plan.unary) task->Finish(absl::OkStatus());
    for (const auto* feeds : {&plan.decode, &plan.prefill}) {
      for (const Feed& feed : *feeds) {
        Sequence& g = *feed.sequence;
        EXPECT_TRUE(g.started);
        EXPECT_EQ(feed.tokens.size(), static_cast<size_t>(g.feeding));
        EXPECT_GE(g.table->capacity(), g.computed + g.feeding) << "fed past its blocks";
        EXPECT_EQ(g.table->tokens(), g.computed) << "the table holds what was computed";
        g.table->Commit(feed.tokens);  // the engine writes these tokens' keys and values
        outcome.fed.push_back(&g);
        if (g.computed + g.feeding < static_cast<int64_t>(g.tokens.size())) continue;
        outcome.sampled.push_back(
            {.sequence = &g, .token = static_cast<int64_t>(rng() % 50), .text = ""});
      }
    }
    return outcome;
  }
  // Hands the results back; answers what the scheduler ended.
  void Update(const StepOutcome& outcome) {
    for (const FinishedGeneration& f : scheduler.Update(outcome)) {
      EXPECT_EQ(f.reason, FinishReason::kMaxTokens);
      EXPECT_EQ(f.generated_tokens, f.task->generate().options.max_tokens);
      f.task->Finish(absl::OkStatus());
    }
  }
  StepPlan Step(absl::Time now = absl::Now()) {
    StepPlan plan = scheduler.Schedule(now);
    Update(Execute(plan));
    return plan;
  }

  Scheduler scheduler;
  std::vector<std::unique_ptr<FakeSink>> sinks;
  std::vector<std::shared_ptr<Task>> tasks;  // beside their sinks
  std::mt19937_64 rng{7};
};

std::vector<int64_t> Prompt(int64_t length, int64_t first = 100) {
  std::vector<int64_t> tokens(length);
  for (int64_t i = 0; i < length; ++i) tokens[i] = first + i;
  return tokens;
}

SchedulerOptions Options() {
  return SchedulerOptions{.max_batch_size = 4, .step_tokens = 16, .prefill_chunk_tokens = 8};
}

TEST(SchedulerTest, APromptIsFedInChunksThenDecodesOneTokenAStep) {
  Harness h(Options());
  h.Generate(Prompt(40), 3);
  const Sequence* g = nullptr;
  std::vector<int64_t> chunks;
  for (int step = 0; step < 10 && h.scheduler.running() + h.scheduler.waiting() > 0; ++step) {
    StepPlan plan = h.Step();
    if (!plan.admitted.empty()) g = plan.admitted[0];
    for (const Feed& f : plan.prefill) chunks.push_back(static_cast<int64_t>(f.tokens.size()));
    for (const Feed& f : plan.decode) chunks.push_back(-static_cast<int64_t>(f.tokens.size()));
  }
  ASSERT_NE(g, nullptr);
  // 16 tokens a step while nothing decodes; then the first token is sampled with the last
  // chunk, and each later one is a decode step of one token.
  EXPECT_EQ(chunks, (std::vector<int64_t>{16, 16, 8, -1, -1}));
  EXPECT_TRUE(h.scheduler.idle());
  EXPECT_EQ(h.scheduler.cache().pool()->used_blocks(), 0);
}

TEST(SchedulerTest, StatesFollowARequestThroughItsLife) {
  Harness h(Options());
  h.Generate(Prompt(20), 3);
  StepPlan plan = h.scheduler.Schedule(absl::Now());
  ASSERT_EQ(plan.admitted.size(), 1u);
  Sequence* g = plan.admitted[0];
  EXPECT_EQ(g->state, SequenceState::kPrefilling);
  h.Update(h.Execute(plan));  // 16 of 20
  plan = h.scheduler.Schedule(absl::Now());
  EXPECT_EQ(g->state, SequenceState::kPrefilling);
  h.Update(h.Execute(plan));  // the last 4, and a token sampled
  plan = h.scheduler.Schedule(absl::Now());
  EXPECT_EQ(g->state, SequenceState::kDecoding);
  // The client stops reading: with this step's token it has 4 unsent, and is paused as the
  // token is counted. Fed nothing, it holds its blocks until they are needed.
  StepOutcome outcome = h.Execute(plan);
  h.sinks[0]->unsent = 4;
  h.Update(outcome);
  EXPECT_EQ(g->state, SequenceState::kPaused);
  EXPECT_FALSE(h.scheduler.HasRunnable());
  plan = h.scheduler.Schedule(absl::Now());
  EXPECT_EQ(g->state, SequenceState::kPaused);
  EXPECT_EQ(plan.paused, 1);
  EXPECT_TRUE(plan.decode.empty() && plan.prefill.empty());
  EXPECT_GT(g->held_blocks(), 0);
  h.sinks[0]->unsent = 3;
  EXPECT_TRUE(h.scheduler.Resume(*h.tasks[0])) << "fewer than max_unsent_events unsent";
  EXPECT_FALSE(h.scheduler.Resume(*h.tasks[0])) << "not paused any more";
  EXPECT_TRUE(h.scheduler.HasRunnable());
  plan = h.scheduler.Schedule(absl::Now());
  EXPECT_EQ(g->state, SequenceState::kDecoding);
  EXPECT_EQ(plan.decode.size(), 1u);
  h.Update(h.Execute(plan));
  EXPECT_TRUE(h.scheduler.idle()) << "max_tokens reached: finished and removed";
}

TEST(SchedulerTest, ACancelledPausedStreamEndsAtTheNextStep) {
  Harness h(Options());
  auto task = h.Generate(Prompt(4), 10);
  h.Unsent(0, 4);
  h.Step();  // prompt and first token: paused as the token is counted
  ASSERT_EQ(h.scheduler.paused(), 1);
  ASSERT_FALSE(h.scheduler.HasRunnable()) << "the engine loop would sleep";
  h.scheduler.Cancel(*task);
  EXPECT_TRUE(h.scheduler.HasRunnable()) << "so the engine loop wakes to end it";
  StepPlan plan = h.Step();
  ASSERT_EQ(plan.ended.size(), 1u);
  EXPECT_EQ(plan.ended[0].second.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(h.scheduler.idle());
  EXPECT_EQ(h.scheduler.paused(), 0);
}

// Where cancellations and deadlines end a generation, so do its own ends, from the token
// sampled and the text so far.
TEST(SchedulerTest, AGenerationEndsAtEndOfTextMaxTokensAStopSequenceOrItsConstraint) {
  Harness h(Options());
  // One step of the generation `task`, the token sampled being `token`, with `text` so far.
  const auto step = [&](int64_t token, bool end_of_text, std::string text,
                        bool constraint_complete = false) {
    StepPlan plan = h.scheduler.Schedule(absl::Now());
    StepOutcome outcome;
    for (const Feed& f : plan.prefill.empty() ? plan.decode : plan.prefill) {
      f.sequence->table->Commit(f.tokens);
      outcome.fed.push_back(f.sequence);
      outcome.sampled.push_back({f.sequence, token, end_of_text, constraint_complete, text});
    }
    EXPECT_EQ(outcome.sampled.size(), 1u);
    return h.scheduler.Update(outcome);
  };
  auto task = h.Generate(Prompt(4), 10);
  task->generate().options.stop = {"xy"};
  task->generate().options.min_tokens = 2;
  EXPECT_TRUE(step(5, false, "axy").empty()) << "a stop sequence counts from min_tokens on";
  auto finished = step(6, false, "axyxy");
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].reason, FinishReason::kStopSequence);
  EXPECT_EQ(finished[0].task, task);
  EXPECT_EQ(finished[0].generated_tokens, 2);
  EXPECT_EQ(finished[0].prompt_tokens, 4);
  EXPECT_TRUE(h.scheduler.idle()) << "removed, its blocks freed";
  EXPECT_EQ(h.scheduler.cache().pool()->used_blocks(), 0);

  h.Generate(Prompt(4, 300), 10);
  EXPECT_TRUE(step(5, false, "a").empty());
  finished = step(2, /*end_of_text=*/true, "a");
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].reason, FinishReason::kEndOfText);
  EXPECT_EQ(finished[0].generated_tokens, 1) << "the end-of-text token is not counted";

  task = h.Generate(Prompt(4, 500), 2);
  task->generate().options.context_limited = true;
  EXPECT_TRUE(step(5, false, "a").empty());
  finished = step(6, false, "ab");
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].reason, FinishReason::kContextFull) << "max_tokens cut to the context";
  EXPECT_TRUE(h.scheduler.idle());

  h.Generate(Prompt(4, 700), 2);
  finished = step(5, false, "a", /*constraint_complete=*/true);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].reason, FinishReason::kConstraintComplete);
  EXPECT_TRUE(h.scheduler.idle());
}

TEST(SchedulerTest, UnaryRequestsAreFifoWithinTheirShareAndTheFirstAlwaysGoes) {
  Harness h(Options());
  auto big = h.Unary(TaskKind::kScore, 1, 100);  // over the whole step budget
  auto small = h.Unary(TaskKind::kNextToken, 1, 4);
  StepPlan plan = h.scheduler.Schedule(absl::Now());
  ASSERT_EQ(plan.unary.size(), 1u) << "the large one runs alone";
  EXPECT_EQ(plan.unary[0], big);
  plan = h.scheduler.Schedule(absl::Now());
  ASSERT_EQ(plan.unary.size(), 1u);
  EXPECT_EQ(plan.unary[0], small);
  // Four of 4 tokens fit 16; the fifth waits, and nothing overtakes it.
  for (int i = 0; i < 5; ++i) h.Unary(TaskKind::kNextToken, 1, 4);
  h.Unary(TaskKind::kEmbed, 1, 1);
  plan = h.scheduler.Schedule(absl::Now());
  EXPECT_EQ(plan.unary.size(), 4u);
  EXPECT_EQ(plan.unary_tokens, 16);
  plan = h.scheduler.Schedule(absl::Now());
  EXPECT_EQ(plan.unary.size(), 2u);
}

TEST(SchedulerTest, WhileGenerationsDecodeTheStepBudgetIsSmallAndSharedWithPrompts) {
  SchedulerOptions options = Options();
  options.max_batch_size = 8;
  Harness h(options);
  h.Generate(Prompt(3), 100);
  h.Step();  // prompt fed, first token sampled: decoding from now on
  h.Generate(Prompt(40, 500), 5);
  for (int i = 0; i < 3; ++i) h.Unary(TaskKind::kNextToken, 1, 4);
  StepPlan plan = h.scheduler.Schedule(absl::Now());
  // prefill_chunk_tokens = 8: unary requests take half (4), the prompt the rest.
  EXPECT_EQ(plan.decode.size(), 1u);
  EXPECT_EQ(plan.unary_tokens, 4);
  EXPECT_EQ(plan.prefill_tokens, 4);
}

TEST(SchedulerTest, PromptChunksInOneCallAreBudgetedPaddedToTheLongest) {
  Harness h(Options());  // 16 tokens a step while nothing decodes
  h.Generate(Prompt(20, 200), 5);
  h.Generate(Prompt(40, 500), 5);
  StepPlan first = h.Step();
  ASSERT_EQ(first.prefill.size(), 1u) << "the oldest prompt's 16 tokens fill the budget";
  EXPECT_EQ(first.prefill_tokens, 16);
  // The oldest's last 4 tokens and 8 of the next prompt's: padded to 8, two chunks cost 16
  // (12 more tokens of the next would have cost 24).
  StepPlan second = h.Step();
  ASSERT_EQ(second.prefill.size(), 2u);
  EXPECT_EQ(second.prefill[0].tokens.size(), 4u);
  EXPECT_EQ(second.prefill[1].tokens.size(), 8u);
}

TEST(SchedulerTest, PromptChunksBesideDecodingArePacedByTheMeasuredTimes) {
  SchedulerOptions options = Options();
  options.step_tokens = 512;
  options.prefill_chunk_tokens = 256;
  options.prefill_pacing = 1.0;
  Harness h(options, 1024);
  h.Generate(Prompt(100), 1000);
  const auto step = [&](absl::Duration decode, absl::Duration other) {
    StepPlan plan = h.scheduler.Schedule(absl::Now());
    StepOutcome outcome = h.Execute(plan);
    outcome.decode_time = decode;
    outcome.other_time = other;
    h.scheduler.Update(outcome);
    return plan;
  };
  // Nothing decodes yet: the step's whole budget; 0.5 ms a prompt token.
  EXPECT_EQ(step(absl::ZeroDuration(), absl::Milliseconds(50)).prefill_tokens, 100);
  h.Generate(Prompt(1000, 500), 5);
  // No decode call measured yet: prefill_chunk_tokens.
  StepPlan plan = step(absl::Milliseconds(20), absl::Milliseconds(128));
  EXPECT_EQ(plan.decode.size(), 1u);
  EXPECT_EQ(plan.prefill_tokens, 256);
  // Then a 20 ms decode call takes 40 prompt tokens of 0.5 ms beside it.
  EXPECT_EQ(step(absl::Milliseconds(20), absl::Milliseconds(20)).prefill_tokens, 40);
  // Decode calls of 1 ms: at least 32 tokens.
  for (int i = 0; i < 8; ++i) step(absl::Milliseconds(1), absl::Milliseconds(16));
  EXPECT_EQ(step(absl::Milliseconds(1), absl::Milliseconds(16)).prefill_tokens, 32);
}

TEST(SchedulerTest, AFullQueueGivesThePlaceOfTheBusiestClientsNewestRequest) {
  Harness h(Options());
  std::vector<std::shared_ptr<Task>> busy;
  for (int i = 0; i < 3; ++i) {
    auto task = std::make_shared<Task>(TaskKind::kGenerate, nullptr);
    task->client = "busy";
    task->input_tokens = 5;
    ASSERT_TRUE(h.scheduler.Add(task, /*max_waiting=*/3).ok());
    busy.push_back(task);
  }
  EXPECT_EQ(h.scheduler.waiting_tokens(), 15);
  // The busy client's own fourth finds no room.
  auto fourth = std::make_shared<Task>(TaskKind::kGenerate, nullptr);
  fourth->client = "busy";
  const auto refused = h.scheduler.Add(fourth, 3);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(), "3 requests queued, its limit; retry later");
  // Another client's takes the place of the busy client's newest, which is handed back.
  auto other = std::make_shared<Task>(TaskKind::kGenerate, nullptr);
  other->client = "other";
  other->input_tokens = 2;
  const auto pushed_out = h.scheduler.Add(other, 3);
  ASSERT_TRUE(pushed_out.ok());
  EXPECT_EQ(*pushed_out, busy.back());
  EXPECT_EQ(h.scheduler.waiting(), 3);
  EXPECT_EQ(h.scheduler.waiting_tokens(), 12);
  // A second client with one queued cannot push out the busy client's second-to-last: it
  // would hold as many as the busy client then.
  auto third = std::make_shared<Task>(TaskKind::kGenerate, nullptr);
  third->client = "other";
  EXPECT_FALSE(h.scheduler.Add(third, 3).ok());
}

TEST(SchedulerTest, ACancelledRequestLeavesTheQueueAtOnceAndIsAnsweredAtTheNextStep) {
  Harness h(Options());
  auto first = h.Unary(TaskKind::kNextToken, 1, 4);
  auto second = h.Unary(TaskKind::kNextToken, 1, 4);
  h.scheduler.Cancel(*first);
  EXPECT_EQ(h.scheduler.waiting(), 1);
  EXPECT_EQ(h.scheduler.waiting_tokens(), 4);
  EXPECT_TRUE(h.scheduler.has_waiting());
  StepPlan plan = h.scheduler.Schedule(absl::Now());
  ASSERT_EQ(plan.ended.size(), 1u);
  EXPECT_EQ(plan.ended[0].first, first);
  EXPECT_EQ(plan.ended[0].second.code(), absl::StatusCode::kCancelled);
  ASSERT_EQ(plan.unary.size(), 1u);
  EXPECT_EQ(plan.unary[0], second);
  // A task no longer held is ignored.
  h.scheduler.Cancel(*first);
  EXPECT_TRUE(h.scheduler.Schedule(absl::Now()).ended.empty());
}

TEST(SchedulerTest, CancelledAndExpiredRequestsEndWithTheirReasonAndFreeTheirBlocks) {
  Harness h(Options());
  const absl::Time now = absl::Now();
  auto running = h.Generate(Prompt(10), 50);
  h.Step(now);
  EXPECT_GT(h.scheduler.cache().pool()->used_blocks(), 0);
  auto expired = h.Unary(TaskKind::kNextToken, 1, 4);
  expired->deadline = now - absl::Seconds(1);
  h.scheduler.Cancel(*running);
  StepPlan plan = h.scheduler.Schedule(now);
  ASSERT_EQ(plan.ended.size(), 2u);
  EXPECT_EQ(plan.ended[0].second.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(plan.ended[1].second.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(plan.unary.empty());
  EXPECT_EQ(h.scheduler.cache().pool()->used_blocks(), 0);
  EXPECT_TRUE(h.scheduler.idle());
}

TEST(SchedulerTest, PausedStreamsGiveUpTheirBlocksFirstThenTheNewest) {
  // 12 blocks of 4 tokens: three 12-token prompts take 3 blocks each (4 with their first token).
  Harness h(Options(), /*blocks=*/12, /*share=*/false);
  auto oldest = h.Generate(Prompt(12, 100), 40);
  auto middle = h.Generate(Prompt(12, 200), 40);
  auto newest = h.Generate(Prompt(12, 300), 40);
  h.Step();
  h.Step();
  const auto sequence = [&](const std::shared_ptr<Task>& task) -> const Sequence& {
    for (const Sequence& g : h.scheduler.sequences()) {
      if (g.task == task) return g;
    }
    throw std::runtime_error("not running");
  };
  // The middle one's client stops reading; the others decode until the pool runs out.
  h.Unsent(1, 4);
  int64_t preemptions = 0;
  for (int step = 0; step < 20 && preemptions == 0; ++step) preemptions += h.Step().preemptions;
  EXPECT_EQ(sequence(middle).held_blocks(), 0) << "the paused stream gave its blocks first";
  EXPECT_EQ(sequence(middle).state, SequenceState::kPaused);
  EXPECT_GT(sequence(newest).held_blocks(), 0);
  for (int step = 0; step < 40; ++step) preemptions += h.Step().preemptions;
  EXPECT_EQ(sequence(oldest).preemptions, 0) << "the oldest always progresses";
  EXPECT_GT(sequence(newest).preemptions, 0);
}

TEST(SchedulerTest, APreemptedSequenceIsComputedAgainWithItsSampledTokens) {
  Harness h(Options(), /*blocks=*/6, /*share=*/false);
  auto first = h.Generate(Prompt(8, 100), 12);
  auto second = h.Generate(Prompt(8, 200), 12);
  bool seen = false;
  for (int step = 0; step < 60 && !h.scheduler.idle(); ++step) {
    StepPlan plan = h.scheduler.Schedule(absl::Now());
    for (Sequence* g : plan.start) {
      if (g->preemptions > 0) {
        seen = true;
        EXPECT_EQ(g->computed, 0);
        EXPECT_GT(g->generated(), 0) << "its sampled tokens are kept and fed again";
      }
    }
    h.Update(h.Execute(plan));
  }
  EXPECT_TRUE(seen);
  EXPECT_TRUE(h.scheduler.idle());
  EXPECT_EQ(h.scheduler.cache().pool()->used_blocks(), 0);
}

TEST(SchedulerTest, APublishedPrefixIsReusedByTheNextPromptThatStartsWithIt) {
  Harness h(Options());
  h.Generate(Prompt(17), 2);
  while (!h.scheduler.idle()) h.Step();
  std::vector<int64_t> longer = Prompt(17);
  longer.push_back(7);
  h.Generate(longer, 2);
  StepPlan plan = h.Step();
  EXPECT_EQ(plan.reused_tokens, 16) << "four full blocks of 4";
  EXPECT_EQ(plan.prefill_tokens, 2);
}

TEST(SchedulerTest, OneClientsManyStreamsLeaveAnotherClientASlotEveryStep) {
  Harness h(Options(), /*blocks=*/256);
  for (int i = 0; i < 20; ++i) h.Generate(Prompt(2, 10 * i), 1000, "greedy");
  for (int step = 0; step < 10; ++step) h.Step();
  auto other = h.Generate(Prompt(2, 900), 8, "other");
  int steps = 0;
  while (other->Unsent() == 0 && steps < 100) {
    bool fed = false;
    StepPlan plan = h.scheduler.Schedule(absl::Now());
    for (const auto* feeds : {&plan.decode, &plan.prefill}) {
      for (const Feed& f : *feeds) fed |= f.sequence->task == other;
    }
    const bool done = [&] {
      for (const Sequence& g : h.scheduler.sequences()) {
        if (g.task == other) return false;
      }
      return true;
    }();
    if (done) break;
    EXPECT_TRUE(fed) << "step " << steps;
    h.Update(h.Execute(plan));
    ++steps;
  }
  EXPECT_EQ(steps, 8) << "one step for the prompt and the first token, then one a token";
}

// Random mixes of requests, clients that stop and resume reading, cancellations: the budgets
// hold at every step, blocks are conserved, and every request ends.
TEST(SchedulerTest, RandomMixesKeepTheBudgetsConserveBlocksAndFinishEverything) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    SchedulerOptions options{.max_batch_size = 1 + static_cast<int64_t>(rng() % 6),
                             .step_tokens = 8 + static_cast<int64_t>(rng() % 40),
                             .prefill_chunk_tokens = 4,
                             .max_unsent_events = 2};
    options.prefill_chunk_tokens = 1 + static_cast<int64_t>(rng() % options.step_tokens);
    const int64_t blocks = 24 + static_cast<int64_t>(rng() % 40);
    Harness h(options, blocks, /*share=*/rng() % 2 == 0);
    std::vector<std::shared_ptr<Task>> tasks;
    int64_t steps = 0;
    for (; steps < 5000; ++steps) {
      if (tasks.size() < 60 && rng() % 3 == 0) {
        if (rng() % 3 == 0) {
          tasks.push_back(h.Unary(TaskKind::kNextToken, 1 + static_cast<int64_t>(rng() % 3),
                                  1 + static_cast<int64_t>(rng() % 30)));
        } else {
          // At most the whole pool with its first tokens, as admission guarantees.
          const int64_t prompt = 1 + static_cast<int64_t>(rng() % 40);
          const int64_t max_tokens = 1 + static_cast<int64_t>(rng() % 20);
          tasks.push_back(h.Generate(Prompt(prompt, static_cast<int64_t>(rng() % 3) * 1000),
                                     max_tokens, "client" + std::to_string(rng() % 3)));
        }
      }
      for (size_t i = 0; i < h.sinks.size(); ++i) {
        if (rng() % 10 == 0) h.Unsent(i, h.sinks[i]->unsent > 0 ? 0 : options.max_unsent_events);
      }
      if (rng() % 50 == 0 && !tasks.empty()) h.scheduler.Cancel(*tasks[rng() % tasks.size()]);
      if (tasks.size() >= 60 && h.scheduler.idle()) break;

      StepPlan plan = h.scheduler.Schedule(absl::Now());
      const int64_t fed = static_cast<int64_t>(plan.decode.size() + plan.prefill.size());
      ASSERT_LE(fed, options.max_batch_size);
      ASSERT_LE(plan.prefill_tokens, options.step_tokens);
      if (plan.unary.size() > 1) {
        ASSERT_LE(plan.unary_tokens, options.step_tokens);
      }
      ASSERT_LE(static_cast<int64_t>(plan.unary.size()), options.max_batch_size);
      h.Update(h.Execute(plan));
      // Blocks: those the running sequences hold are the pool's referenced ones.
      std::set<int32_t> held;
      for (const Sequence& g : h.scheduler.sequences()) {
        held.insert(g.table->blocks().begin(), g.table->blocks().end());
        ASSERT_EQ(g.table->tokens(), g.computed);
      }
      ASSERT_EQ(static_cast<int64_t>(held.size()), h.scheduler.cache().pool()->used_blocks());
    }
    // Every client reads again: everything finishes, and every block comes back.
    for (size_t i = 0; i < h.sinks.size(); ++i) h.Unsent(i, 0);
    for (int64_t more = 0; more < 2000 && !h.scheduler.idle(); ++more) h.Step();
    EXPECT_TRUE(h.scheduler.idle()) << "something starved";
    EXPECT_EQ(h.scheduler.cache().pool()->used_blocks(), 0);
    for (auto& sink : h.sinks) EXPECT_EQ(sink->statuses.size(), 1u) << "each answered once";
  }
}

}  // namespace
}  // namespace attnserve::server
