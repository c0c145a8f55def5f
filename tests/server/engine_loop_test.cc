// The model scheduler's concurrency, driven directly (no gRPC, whose Debian build ThreadSanitizer
// cannot see into): many threads submitting at once, cancellation, deadlines, a full queue and a
// drain under load. Every task must complete exactly once, and make test-tsan runs these under
// ThreadSanitizer.
#include "server/core/engine_loop.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "engine/architectures/model.h"

namespace attnserve::server {
namespace {

constexpr char kDemo[] = ATTNSERVE_SOURCE_DIR "/models/demo";

// A call's stand-in: counts events and completions, and lets a test wait for the end.
// With a clock, a Send ticks it and a Complete reads it: the order of events across calls.
class RecordingSink final : public TaskSink {
 public:
  explicit RecordingSink(std::atomic<int>* clock = nullptr) : clock_(clock) {}

  void Send(GenerationEvent event) override {
    if (clock_) clock_->fetch_add(1);
    absl::SleepFor(send_delay_);  // a slow client write, on the delivering thread
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
    changed_.notify_all();
  }
  void Complete(absl::Status status) override {
    std::lock_guard lock(mutex_);
    if (clock_) completed_at_ = clock_->load();
    statuses_.push_back(std::move(status));
    changed_.notify_all();
  }
  void set_send_delay(absl::Duration delay) { send_delay_ = delay; }
  int completed_at() {
    std::lock_guard lock(mutex_);
    return completed_at_;
  }
  absl::Status Wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !statuses_.empty(); });
    return statuses_.front();
  }
  void WaitForEvents(size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return events_.size() >= count || !statuses_.empty(); });
  }
  int completions() {
    std::lock_guard lock(mutex_);
    return static_cast<int>(statuses_.size());
  }
  std::vector<GenerationEvent> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<GenerationEvent> events_;
  std::vector<absl::Status> statuses_;
  std::atomic<int>* const clock_;
  int completed_at_ = -1;
  absl::Duration send_delay_;
};

// A call whose client reads only once told to: its events wait unsent until then. Each read
// resumes the task, from the reading thread, as a call's write completion does.
class SlowReaderSink final : public TaskSink {
 public:
  ~SlowReaderSink() override {
    if (reader_.joinable()) reader_.join();
  }
  void Send(GenerationEvent event) override {
    std::lock_guard lock(mutex_);
    unsent_.push_back(std::move(event));
    changed_.notify_all();
  }
  void Complete(absl::Status status) override {
    std::lock_guard lock(mutex_);
    status_ = std::move(status);
    changed_.notify_all();
  }
  int64_t Unsent() const override {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(unsent_.size());
  }
  // Reads every event from now on, on a thread of its own, until the end.
  void StartReading(std::shared_ptr<Task> task) {
    reader_ = std::thread([this, task = std::move(task)] {
      std::unique_lock lock(mutex_);
      while (true) {
        changed_.wait(lock, [&] { return !unsent_.empty() || status_.has_value(); });
        if (unsent_.empty()) return;
        read_.push_back(std::move(unsent_.front()));
        unsent_.pop_front();
        lock.unlock();
        task->Resume();
        lock.lock();
      }
    });
  }
  absl::Status Wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return status_.has_value(); });
    return *status_;
  }
  size_t read() {
    if (reader_.joinable()) reader_.join();
    return read_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<GenerationEvent> unsent_;
  std::vector<GenerationEvent> read_;
  std::optional<absl::Status> status_;
  std::thread reader_;
};

struct Call {
  std::unique_ptr<RecordingSink> sink = std::make_unique<RecordingSink>();
  std::shared_ptr<Task> task;
  absl::Status submitted;
};

Call MakeCall(TaskKind kind, int seed, int64_t generate_tokens = 8,
              std::atomic<int>* clock = nullptr) {
  Call call;
  call.sink = std::make_unique<RecordingSink>(clock);
  call.task = std::make_shared<Task>(kind, call.sink.get());
  std::vector<int64_t> ids;
  for (int i = 0; i < 5 + seed % 20; ++i) ids.push_back(32 + (seed * 7 + i) % 90);
  switch (kind) {
    case TaskKind::kNextToken:
      call.task->next_token().sequences = {ids};
      break;
    case TaskKind::kScore:
      call.task->score().sequences = {ids};
      break;
    case TaskKind::kEmbed:
      call.task->embed().inputs.tokens = {ids};
      break;
    case TaskKind::kClassify:
      call.task->classify().inputs.tokens = {ids};
      break;
    case TaskKind::kGenerate:
      call.task->generate().sequences = {ids};
      call.task->generate().options.max_tokens = generate_tokens;
      call.task->generate().options.seed = static_cast<uint64_t>(seed);
      break;
  }
  return call;
}

class EngineLoopTest : public ::testing::Test {
 protected:
  std::unique_ptr<EngineLoop> StartWorker(EngineLoopOptions options = {},
                                          const std::string& directory = kDemo) {
    auto model = LoadModel(directory);
    EXPECT_TRUE(model.ok()) << model.status();
    auto worker = EngineLoop::Create("demo", *std::move(model), options, metrics_);
    EXPECT_TRUE(worker.ok()) << worker.status();
    return *std::move(worker);
  }
  // One decoding slot, held by `running` (a long generation), and three queue places behind it.
  std::unique_ptr<EngineLoop> StartWorkerWithItsSlotHeld(Call& running) {
    EngineLoopOptions options;
    options.max_queue_size = 3;
    options.max_batch_size = 1;
    auto worker = StartWorker(options);
    EXPECT_TRUE(worker->Submit(running.task).ok());
    running.sink->WaitForEvents(1);
    return worker;
  }
  double Gauge(const prometheus::Family<prometheus::Gauge>& family) {
    return SumByLabel(family)[""];
  }

  prometheus::Registry registry_;
  ServerMetrics metrics_{registry_};
};

// Finished generations leave their full blocks published for reuse, up to prefix_cache_tokens:
// six generations of 5 to 24 prompt tokens and 100 generated fill 3 blocks of 32 each.
TEST_F(EngineLoopTest, ThePrefixCacheKeepsNoMoreThanItsTokens) {
  for (const int64_t limit : {int64_t{64}, int64_t{16384}}) {
    prometheus::Registry registry;
    ServerMetrics metrics(registry);
    EngineLoopOptions options;
    options.prefix_cache_tokens = limit;
    auto model = LoadModel(kDemo);
    ASSERT_TRUE(model.ok()) << model.status();
    auto worker = EngineLoop::Create("demo", *std::move(model), options, metrics);
    ASSERT_TRUE(worker.ok()) << worker.status();
    for (int seed = 0; seed < 6; ++seed) {
      Call call = MakeCall(TaskKind::kGenerate, seed, /*generate_tokens=*/100);
      call.task->generate().options.ignore_eos = true;
      ASSERT_TRUE((*worker)->Submit(call.task).ok());
      ASSERT_TRUE(call.sink->Wait().ok());
    }
    (*worker)->Drain();
    const double cached = SumByLabel(metrics.kv_blocks, "state")["cached"];
    if (limit == 64) {
      EXPECT_EQ(cached, 2) << "64 tokens are 2 blocks of 32";
    } else {
      EXPECT_EQ(cached, 18);
    }
  }
}

TEST_F(EngineLoopTest, ConcurrentSubmittersAreEachAnsweredOnce) {
  auto worker = StartWorker();
  constexpr int kThreads = 6, kPerThread = 12;
  std::vector<std::vector<Call>> calls(kThreads);
  std::vector<std::thread> submitters;
  std::atomic<bool> scraping{true};
  // Metrics are read while the scheduler writes them, as /metrics does.
  std::thread scraper([&] {
    while (scraping) (void)prometheus::TextSerializer().Serialize(registry_.Collect());
  });
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int seed = t * kPerThread + i;
        const TaskKind kind = seed % 3 == 0   ? TaskKind::kGenerate
                              : seed % 3 == 1 ? TaskKind::kNextToken
                                              : TaskKind::kScore;
        Call call = MakeCall(kind, seed);
        call.submitted = worker->Submit(call.task);
        calls[t].push_back(std::move(call));
      }
    });
  }
  for (auto& s : submitters) s.join();
  for (auto& per_thread : calls) {
    for (Call& call : per_thread) {
      ASSERT_TRUE(call.submitted.ok()) << call.submitted;
      EXPECT_TRUE(call.sink->Wait().ok());
      if (call.task->kind == TaskKind::kGenerate) {
        const auto events = call.sink->events();
        ASSERT_FALSE(events.empty());
        EXPECT_TRUE(events.back().finished);
      } else if (call.task->kind == TaskKind::kNextToken) {
        EXPECT_EQ(call.task->next_token().rows.size(), 1u);
      } else {
        EXPECT_EQ(call.task->score().result.tokens.size(),
                  call.task->score().sequences[0].size() - 1);
      }
    }
  }
  worker->Drain();
  scraping = false;
  scraper.join();
  for (auto& per_thread : calls) {
    for (Call& call : per_thread) EXPECT_EQ(call.sink->completions(), 1);
  }
  EXPECT_EQ(Gauge(metrics_.active_sequences), 0);
  EXPECT_EQ(Gauge(metrics_.queue_length), 0);
}

TEST_F(EngineLoopTest, AnswersDeliveredByTheAnswerWriterComeInOrderAndEndOnce) {
  // The server's way: every stream's events and every ending leave the engine thread for the
  // answer writer's, while other threads submit and cancel.
  AnswerWriter writer;
  EngineLoopOptions options;
  options.answers = &writer;
  auto worker = StartWorker(options);
  std::vector<Call> calls;
  for (int i = 0; i < 12; ++i) {
    calls.push_back(MakeCall(i % 3 == 0 ? TaskKind::kNextToken : TaskKind::kGenerate, i,
                             /*generate_tokens=*/i % 4 == 1 ? 600 : 12));
  }
  std::vector<std::thread> submitters;
  for (Call& call : calls) {
    submitters.emplace_back([&worker, &call] { call.submitted = worker->Submit(call.task); });
  }
  for (auto& t : submitters) t.join();
  // The long ones are cancelled once they stream.
  for (Call& call : calls) {
    if (call.task->kind == TaskKind::kGenerate && call.task->generate().options.max_tokens == 600) {
      call.sink->WaitForEvents(2);
      worker->Cancel(*call.task);
    }
  }
  for (Call& call : calls) {
    ASSERT_TRUE(call.submitted.ok()) << call.submitted;
    const absl::Status status = call.sink->Wait();
    EXPECT_EQ(call.sink->completions(), 1);
    if (call.task->kind != TaskKind::kGenerate) {
      EXPECT_TRUE(status.ok()) << status;
      continue;
    }
    const std::vector<GenerationEvent> events = call.sink->events();
    if (call.task->generate().options.max_tokens == 600) {
      EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
      EXPECT_LT(events.size(), 600u);
      continue;
    }
    // Every token, then the end, in order, before the call completes.
    EXPECT_TRUE(status.ok()) << status;
    ASSERT_FALSE(events.empty());
    EXPECT_TRUE(events.back().finished);
    for (size_t e = 0; e + 1 < events.size(); ++e) EXPECT_FALSE(events[e].finished);
  }
  EXPECT_EQ(Gauge(metrics_.active_sequences), 0);
}

TEST_F(EngineLoopTest, StreamsPausedBehindASlowAnswerWriterRunAgainOnceItDelivers) {
  // Six streams whose every event takes the answer writer 3 ms to deliver: the engine makes
  // them faster than that, so each stream soon has max_unsent_events undelivered and is paused.
  // Nobody reads on their behalf (a RecordingSink never resumes): the loop must see the writer
  // catch up. Before it did, such streams stayed paused for good (a CI run hung here).
  AnswerWriter writer;
  EngineLoopOptions options;
  options.answers = &writer;
  auto worker = StartWorker(options);
  std::vector<Call> calls;
  for (int i = 0; i < 6; ++i) {
    calls.push_back(MakeCall(TaskKind::kGenerate, i, /*generate_tokens=*/40));
    calls.back().task->generate().options.ignore_eos = true;
    calls.back().sink->set_send_delay(absl::Milliseconds(3));
  }
  std::atomic<bool> done = false;
  double most_paused = 0;
  std::thread watcher([&] {
    while (!done) {
      most_paused = std::max(most_paused, Gauge(metrics_.paused_streams));
      absl::SleepFor(absl::Microseconds(200));
    }
  });
  for (Call& call : calls) ASSERT_TRUE(worker->Submit(call.task).ok());
  for (Call& call : calls) {
    EXPECT_TRUE(call.sink->Wait().ok());
    EXPECT_EQ(call.sink->events().size(), 41u);  // 40 tokens, then the end
  }
  done = true;
  watcher.join();
  EXPECT_GT(most_paused, 0) << "no stream was paused: the test tests nothing";
}

TEST_F(EngineLoopTest, CancelledGenerationsEndAndFreeTheirSequences) {
  auto worker = StartWorker();
  std::vector<Call> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(MakeCall(TaskKind::kGenerate, i, /*generate_tokens=*/900));
    ASSERT_TRUE(worker->Submit(calls.back().task).ok());
  }
  for (Call& call : calls) call.sink->WaitForEvents(2);
  // Cancelled from other threads while the scheduler decodes, as gRPC's OnCancel does.
  std::vector<std::thread> cancellers;
  for (Call& call : calls) {
    cancellers.emplace_back([&worker, task = call.task] { worker->Cancel(*task); });
  }
  for (auto& c : cancellers) c.join();
  for (Call& call : calls) EXPECT_EQ(call.sink->Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Gauge(metrics_.active_sequences), 0);
}

// A generation of exactly 40 tokens, answered to `sink`.
std::shared_ptr<Task> FortyTokens(TaskSink& sink) {
  auto task = std::make_shared<Task>(TaskKind::kGenerate, &sink);
  task->generate().sequences = {{40, 41, 42, 43}};
  task->generate().options.max_tokens = 40;
  task->generate().options.ignore_eos = true;
  return task;
}

// A paused stream takes nothing until its client reads, and then goes on to its end; the pause
// and the resumption reach the scheduler from different threads (make test-tsan).
TEST_F(EngineLoopTest, AStreamWhoseClientStopsReadingIsPausedUntilItReads) {
  auto worker = StartWorker();
  SlowReaderSink sink;
  auto task = FortyTokens(sink);
  task->resume = [&worker, t = task.get()] { worker->Resume(*t); };
  ASSERT_TRUE(worker->Submit(task).ok());
  for (int i = 0; i < 500 && Gauge(metrics_.paused_streams) == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(Gauge(metrics_.paused_streams), 1);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(sink.Unsent(), worker->options().max_unsent_events) << "nothing made once paused";
  sink.StartReading(task);
  EXPECT_TRUE(sink.Wait().ok());
  EXPECT_EQ(sink.read(), 41u) << "40 tokens, then the finish";
  EXPECT_EQ(Gauge(metrics_.paused_streams), 0);
}

// With every stream paused the loop sleeps, and still ends one at its deadline.
TEST_F(EngineLoopTest, APausedStreamEndsAtItsDeadline) {
  auto worker = StartWorker();
  SlowReaderSink sink;
  auto task = FortyTokens(sink);
  task->deadline = absl::Now() + absl::Milliseconds(500);
  ASSERT_TRUE(worker->Submit(task).ok());
  EXPECT_EQ(sink.Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - task->deadline, absl::Seconds(5));
  EXPECT_EQ(sink.Unsent(), worker->options().max_unsent_events);
}

TEST_F(EngineLoopTest, DeadlinesAndAFullQueueAreRefused) {
  // A long generation holds the scheduler; behind it the queue fills to its limit.
  Call running = MakeCall(TaskKind::kGenerate, 1, 400);
  auto worker = StartWorkerWithItsSlotHeld(running);
  Call expired = MakeCall(TaskKind::kNextToken, 2);
  expired.task->deadline = absl::Now() - absl::Seconds(1);
  ASSERT_TRUE(worker->Submit(expired.task).ok());
  std::vector<Call> queued;
  absl::Status refused;
  for (int i = 0; i < 5 && refused.ok(); ++i) {
    queued.push_back(MakeCall(TaskKind::kGenerate, 10 + i));
    refused = worker->Submit(queued.back().task);
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("requests queued, its limit"), std::string::npos) << refused;
  worker->Cancel(*running.task);
  EXPECT_EQ(expired.sink->Wait().code(), absl::StatusCode::kDeadlineExceeded);
  queued.pop_back();  // the refused one never reaches the scheduler
  for (Call& call : queued) EXPECT_TRUE(call.sink->Wait().ok());
}

TEST_F(EngineLoopTest, AFullQueueMakesRoomForAClientWithFewerRequestsQueued) {
  // Client "busy" holds the one decoding slot and fills the queue behind it (generations:
  // unary requests would run beside the decoding one).
  Call running = MakeCall(TaskKind::kGenerate, 1, 400);
  running.task->client = "busy";
  auto worker = StartWorkerWithItsSlotHeld(running);
  std::vector<Call> busy;
  for (int i = 0; i < 3; ++i) {
    busy.push_back(MakeCall(TaskKind::kGenerate, 10 + i));
    busy.back().task->client = "busy";
    ASSERT_TRUE(worker->Submit(busy.back().task).ok());
  }
  // Its fourth is refused: the queue is full and it holds all of it.
  Call fourth = MakeCall(TaskKind::kGenerate, 13);
  fourth.task->client = "busy";
  const absl::Status refused = worker->Submit(fourth.task);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("requests queued, its limit"), std::string::npos) << refused;
  // Another client's request takes the place of the busy client's newest.
  Call other = MakeCall(TaskKind::kGenerate, 20);
  other.task->client = "other";
  ASSERT_TRUE(worker->Submit(other.task).ok());
  const absl::Status pushed_out = busy.back().sink->Wait();
  EXPECT_EQ(pushed_out.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(pushed_out.message().find("a client with fewer requests queued"), std::string::npos)
      << pushed_out;
  worker->Cancel(*running.task);
  EXPECT_TRUE(other.sink->Wait().ok());
  for (size_t i = 0; i + 1 < busy.size(); ++i) EXPECT_TRUE(busy[i].sink->Wait().ok());
  EXPECT_EQ(busy.back().sink->completions(), 1);
}
TEST_F(EngineLoopTest, UnaryRequestsShareStepsWithDecoding) {
  // While a generation decodes, a step takes prefill_chunk_tokens: each of these 24-token
  // requests runs in a step of its own, beside one decoded token, rather than all of them in
  // one step that holds the generation up.
  EngineLoopOptions options;
  options.prefill_chunk_tokens = 16;
  auto worker = StartWorker(options);
  std::atomic<int> clock{0};
  Call generation = MakeCall(TaskKind::kGenerate, 1, /*generate_tokens=*/400, &clock);
  ASSERT_TRUE(worker->Submit(generation.task).ok());
  generation.sink->WaitForEvents(2);
  std::vector<Call> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(MakeCall(TaskKind::kNextToken, 19 + 20 * i, 8, &clock));
    ASSERT_EQ(requests.back().task->next_token().sequences[0].size(), 24u);
    ASSERT_TRUE(worker->Submit(requests.back().task).ok());
  }
  std::vector<int> completed_at;
  for (Call& call : requests) {
    ASSERT_TRUE(call.sink->Wait().ok());
    completed_at.push_back(call.sink->completed_at());
  }
  for (size_t i = 1; i < completed_at.size(); ++i) {
    EXPECT_GT(completed_at[i], completed_at[i - 1])
        << "requests " << i - 1 << " and " << i << " ran in one step";
  }
  worker->Cancel(*generation.task);
  EXPECT_EQ(generation.sink->Wait().code(), absl::StatusCode::kCancelled);
}

std::vector<GenerationEvent> GeneratedTokens(RecordingSink& sink) {
  std::vector<GenerationEvent> tokens;
  for (const auto& event : sink.events()) {
    if (!event.finished) tokens.push_back(event);
  }
  return tokens;
}

TEST_F(EngineLoopTest, PreemptedEncoderDecoderGenerationsEncodeAgainAndGiveTheSameTokens) {
  // Four generations of 8 blocks each (a 20-token source: 3 blocks of 8; a 5-token prompt and
  // 30 tokens: 5) in a pool of 20: some are preempted, their source dropped with their blocks
  // and encoded again, and each gives the tokens (and their probabilities) it gives alone.
  const std::string translator = ATTNSERVE_GOLDEN_DIR "/model_seq2seq_softmax_sinusoidal_0";
  const auto make = [](int i) {
    Call call = MakeCall(TaskKind::kGenerate, i, /*generate_tokens=*/30);
    GenerateJob& job = call.task->generate();
    job.sequences[0].resize(5);
    job.sources = {std::vector<int64_t>(20, 40 + 3 * i)};
    for (int t = 0; t < 20; t += 3) job.sources[0][t] = 50 + i + t;
    return call;
  };
  std::vector<std::vector<GenerationEvent>> alone;
  {
    auto worker = StartWorker({}, translator);
    for (int i = 0; i < 4; ++i) {
      Call call = make(i);
      ASSERT_TRUE(worker->Submit(call.task).ok());
      ASSERT_TRUE(call.sink->Wait().ok());
      alone.push_back(GeneratedTokens(*call.sink));
    }
  }
  EngineLoopOptions options;
  options.kv_block_tokens = 8;
  auto shape = [&] {
    auto model = LoadModel(translator);
    return (*model)->As<Seq2Seq>()->CacheShape(8);
  }();
  ASSERT_TRUE(shape.has_value());
  options.budget.kv_cache_bytes = 20 * shape->BlockBytes();
  auto worker = StartWorker(options, translator);
  std::vector<Call> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(make(i));
    ASSERT_TRUE(worker->Submit(calls.back().task).ok());
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(calls[i].sink->Wait().ok()) << calls[i].sink->Wait();
    const auto tokens = GeneratedTokens(*calls[i].sink);
    ASSERT_EQ(tokens.size(), alone[i].size()) << "generation " << i;
    for (size_t t = 0; t < tokens.size(); ++t) {
      EXPECT_EQ(tokens[t].id, alone[i][t].id) << "generation " << i << ", token " << t;
      EXPECT_NEAR(tokens[t].log_probability, alone[i][t].log_probability, 1e-4)
          << "generation " << i << ", token " << t;
    }
  }
  EXPECT_GT(SumByLabel(metrics_.preemptions)[""], 0);
}

TEST_F(EngineLoopTest, ConcurrentEmbedsShareEngineCallsAndEachGetsItsOwnAnswer) {
  // Sequences of different lengths, pooled, per token and with per-head contributions: those
  // that can share a call do (fewer engine calls than requests), and each answer equals the
  // one its request gets alone.
  const std::string embedder =
      ATTNSERVE_GOLDEN_DIR "/model_encoder_softmax_learned_mean_rms_norm_pre";
  const auto make = [](int i) {
    Call call = MakeCall(TaskKind::kEmbed, i);
    EmbedJob& job = call.task->embed();
    if (i % 5 == 1) job.pooling = Pooling::kNone;
    if (i % 5 == 2) job.pooling = Pooling::kLast;
    if (i % 7 == 3) job.head_layers = {1};
    job.normalize = i % 2 == 0;
    return call;
  };
  constexpr int kCalls = 16;
  std::vector<std::vector<Embedding>> alone;
  {
    auto worker = StartWorker({}, embedder);
    for (int i = 0; i < kCalls; ++i) {
      Call call = make(i);
      ASSERT_TRUE(worker->Submit(call.task).ok());
      ASSERT_TRUE(call.sink->Wait().ok());
      alone.push_back(call.task->embed().embeddings);
    }
  }
  const auto engine_calls = [&] {
    const auto collected =
        metrics_.batch_size.Add({{"model", "demo"}, {"method", "Embed"}}).Collect();
    return static_cast<double>(collected.histogram.sample_count);
  };
  const double before = engine_calls();
  EXPECT_EQ(before, kCalls);
  EngineLoopOptions options;
  options.max_queue_delay = absl::Milliseconds(200);  // all queued before the first step
  auto worker = StartWorker(options, embedder);
  std::vector<Call> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(make(i));
    ASSERT_TRUE(worker->Submit(calls.back().task).ok());
  }
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(calls[i].sink->Wait().ok()) << calls[i].sink->Wait();
    const std::vector<Embedding>& got = calls[i].task->embed().embeddings;
    ASSERT_EQ(got.size(), alone[i].size());
    for (size_t e = 0; e < got.size(); ++e) {
      const Embedding &ours = got[e], &own = alone[i][e];
      ASSERT_EQ(ours.rows, own.rows) << "request " << i;
      ASSERT_EQ(ours.values.size(), own.values.size()) << "request " << i;
      for (size_t v = 0; v < ours.values.size(); ++v) {
        EXPECT_NEAR(ours.values[v], own.values[v], 1e-5) << "request " << i << ", value " << v;
      }
      ASSERT_EQ(ours.head_contributions.size(), own.head_contributions.size());
    }
  }
  EXPECT_LT(engine_calls() - before, kCalls / 2);
}

TEST_F(EngineLoopTest, EmbedBudgetsCountTheGroupsTheEngineRuns) {
  // 39 sequences of 4 tokens and one of 60: padded to the longest they would be 2,400 tokens,
  // but the encoder runs them in two groups of similar length, 216 tokens in all.
  EngineLoopOptions options;
  options.max_batch_tokens = 500;
  auto worker =
      StartWorker(options, ATTNSERVE_GOLDEN_DIR "/model_encoder_softmax_learned_mean_rms_norm_pre");
  const auto make = [](int long_sequences) {
    Call call = MakeCall(TaskKind::kEmbed, 0);
    call.task->embed().inputs.tokens.clear();
    for (int i = 0; i < 40; ++i) {
      call.task->embed().inputs.tokens.push_back(
          std::vector<int64_t>(i < long_sequences ? 60 : 4, 40 + i));
    }
    return call;
  };
  Call grouped = make(1);
  ASSERT_TRUE(worker->Submit(grouped.task).ok());
  ASSERT_TRUE(grouped.sink->Wait().ok());
  EXPECT_EQ(grouped.task->embed().embeddings.size(), 40u);
  // Real work over the limit is refused, saying how it was counted: 20 × 4 + 20 × 60.
  Call over = make(20);
  const absl::Status refused = worker->Submit(over.task);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("the request has 1280 tokens (40 sequences in 2 groups of "
                                   "similar length, each padded to its longest)"),
            std::string::npos)
      << refused;
}

TEST(EmbedPassesTest, APassHoldsAtMost8192PaddedTokens) {
  // 40 texts of 500 tokens (a rerank's documents): three passes of 16, 16 and 8, so that
  // activations stay bounded however many texts a request holds.
  auto model = LoadModel(ATTNSERVE_GOLDEN_DIR "/model_encoder_softmax_learned_mean_rms_norm_pre");
  ASSERT_TRUE(model.ok()) << model.status();
  ModelInputs inputs;
  inputs.tokens.assign(40, std::vector<int64_t>(500, 7));
  const auto passes = (*model)->servable->EmbedPasses(inputs, false);
  ASSERT_EQ(passes.size(), 3u);
  EXPECT_EQ(passes[0].size(), 16u);
  EXPECT_EQ(passes[2].size(), 8u);
}

TEST_F(EngineLoopTest, AnswersThatWouldHoldNaNAreInternalErrors) {
  // Finite weights whose values overflow: the final norm scales every state by 3e38, so the
  // logits are infinite and their log-softmax NaN. No answer may carry that as OK.
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "overflowing_model";
  fs::remove_all(dir);
  fs::copy(ATTNSERVE_GOLDEN_DIR "/model_causal_lm_softmax_layer_norm_pre_sinusoidal", dir,
           fs::copy_options::recursive);
  std::string bytes;
  {
    std::ifstream in(dir / "model.safetensors", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, length));
  const uint64_t begin = header["final_norm.weight"]["data_offsets"][0];
  const uint64_t end = header["final_norm.weight"]["data_offsets"][1];
  for (uint64_t at = begin; at < end; at += 4) {
    const float huge = 3e38f;
    std::memcpy(bytes.data() + 8 + length + at, &huge, 4);
  }
  std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  auto worker = StartWorker({}, dir.string());
  for (TaskKind kind : {TaskKind::kNextToken, TaskKind::kScore, TaskKind::kGenerate}) {
    Call call = MakeCall(kind, 3);
    ASSERT_TRUE(worker->Submit(call.task).ok());
    const absl::Status status = call.sink->Wait();
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_NE(status.message().find("computed NaN"), std::string::npos) << status;
    EXPECT_TRUE(GeneratedTokens(*call.sink).empty());
  }
}

TEST_F(EngineLoopTest, DrainUnderLoadFinishesEverythingAccepted) {
  auto worker = StartWorker();
  constexpr int kThreads = 4;
  std::vector<std::vector<Call>> calls(kThreads);
  std::atomic<bool> go{true};
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; go && i < 200; ++i) {
        Call call = MakeCall(i % 2 ? TaskKind::kNextToken : TaskKind::kGenerate, t * 1000 + i);
        call.submitted = worker->Submit(call.task);
        const bool refused = !call.submitted.ok();
        calls[t].push_back(std::move(call));
        if (refused) return;  // draining: everything from here on is refused
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  worker->Drain();  // returns once everything accepted has finished
  go = false;
  for (auto& s : submitters) s.join();
  int accepted = 0;
  for (auto& per_thread : calls) {
    for (Call& call : per_thread) {
      if (call.submitted.ok()) {
        ++accepted;
        EXPECT_EQ(call.sink->completions(), 1);
        EXPECT_TRUE(call.sink->Wait().ok());
      } else {
        EXPECT_EQ(call.submitted.code(), absl::StatusCode::kUnavailable);
        EXPECT_EQ(call.sink->completions(), 0);
      }
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(worker->Submit(MakeCall(TaskKind::kNextToken, 1).task).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace attnserve::server
