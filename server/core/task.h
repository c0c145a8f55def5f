// A request on its way from a protocol's handler to a model's engine loop, and its result on the
// way back: where it stands (its client, deadline, engine call, answer bytes), the calls that
// reach the scheduler (cancel, resume), its method's inputs and results (one of five jobs), and
// the sink its answers go to. No thread waits for it: the engine fills in the result and hands
// it to the task's sink, the call that asked, which answers its client. Generation results go out
// as a stream of events, delivered off the engine thread (server/core/step_answers.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/architectures/activation_memory.h"
#include "engine/architectures/encoder.h"
#include "server/core/held_bytes.h"
#include "server/core/results.h"
#include "text/structured/token_matcher.h"

namespace attnserve::server {

enum class TaskKind { kNextToken, kScore, kEmbed, kClassify, kGenerate };

struct GenerateOptions {
  int64_t max_tokens = 64;
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  int64_t top_logprobs = 0;
  bool context_limited = false;  // max_tokens was cut to what the context holds
  // End-of-text is never drawn: with ignore_eos at all, else for the first min_tokens tokens,
  // during which stop sequences are not looked for either.
  bool ignore_eos = false;
  int64_t min_tokens = 0;
};

// Where a task's results go: called by one thread at a time, in order (the engine loop's or the
// answer writer's).
class TaskSink {
 public:
  virtual ~TaskSink() = default;
  virtual void Send(GenerationEvent event) = 0;    // Generate: one streamed event
  virtual void Complete(absl::Status status) = 0;  // exactly once, last
  // Generate: events sent but not yet written to the client (backpressure).
  virtual int64_t Unsent() const { return 0; }
};

// Each method's inputs, validated by the service before the task is queued, and its results,
// filled in by the executor; each protocol's edge builds its answer from them.
struct NextTokenJob {
  TokenSequences sequences;
  TokenSequences sources;  // encoder-decoder models: one source per sequence
  int64_t top_k = 10;
  float temperature = 1.0f;
  bool full_distribution = false;
  std::vector<NextTokenRow> rows;  // per sequence
};

struct ScoreJob {
  TokenSequences sequences;  // one
  TokenSequences sources;    // encoder-decoder models: its source
  ScoreResult result;
};

struct EmbedJob {
  ModelInputs inputs;
  std::optional<Pooling> pooling;  // nullopt: the model's
  bool normalize = false;
  int64_t dimensions = 0;            // the first values of each vector kept; 0: all
  std::vector<int64_t> head_layers;  // layers whose per-head contributions to return
  // Per-token states go out padded to the longest input (an Open Inference Protocol tensor), so
  // the answer's size follows the longest, not each input's length.
  bool pad_token_states = false;
  std::vector<Embedding> embeddings;  // per sequence
};

struct ClassifyJob {
  ModelInputs inputs;       // token ids, and their types for models that take them
  bool raw_scores = false;  // the logits, not the model's score activation of them
  // Bytes of the request's texts its answer repeats (a rerank's documents), which the answer's
  // bound counts.
  int64_t echoed_bytes = 0;
  std::vector<std::vector<float>> scores;  // per sequence, one per label
  // The model's names of its labels (config.classifier.labels), which outlive the task.
  const std::vector<std::string>* labels = nullptr;
};

struct GenerateJob {
  TokenSequences sequences;  // one: the prompt
  TokenSequences sources;    // encoder-decoder models: its source
  GenerateOptions options;
  // Answered in one message (an Open Inference Protocol call, an unstreamed completion): the
  // events are collected here rather than streamed, so the answer's size follows max_tokens.
  bool collect_events = false;
  std::vector<GenerationEvent> events;
  // What the answer is constrained to (a JSON schema, a regex, a grammar), at its progress so
  // far: the executor samples only tokens it allows.
  std::unique_ptr<structured::TokenMatcher> constraint;
};

struct Task {
  // The sink outlives the task's stay in the scheduler: it is freed only after Complete.
  Task(TaskKind kind, TaskSink* sink) : kind(kind), job_(Job(kind)), sink_(sink) {}

  const TaskKind kind;
  absl::Time enqueued = absl::Now();
  absl::Time deadline = absl::InfiniteFuture();
  // Who asked (an API key, a connection or an address): queue places and decoding slots are
  // shared out evenly among clients.
  std::string client;
  int64_t input_tokens = 0;  // set by EngineLoop::Submit, for its completion estimate
  EngineCall call;           // set by EngineLoop::Submit: the engine call that answers it
  // A JSON answer spells out what protobuf packs (field names, decimal floats, escaped text):
  // its bound is this many times attnserve.v1's.
  int64_t answer_scale = 1;
  // The most bytes its answer can take, as admitted, counted against the server's response
  // budget until the last holder of the task, the call, has sent its answer.
  HeldBytes response_bytes;

  // Set before the task is submitted: tell its engine loop that the task's client read
  // (`resume`, see Resume) and that it left (`cancel`). Any thread.
  std::function<void()> resume;
  std::function<void()> cancel;
  // The client left before the task was queued: it is refused (see Cancel).
  std::atomic<bool> cancelled{false};
  // Generate: events the engine made that are not yet handed to the sink (StepAnswers).
  std::atomic<int64_t> undelivered{0};

  // The method's inputs and results: the one of `kind`.
  NextTokenJob& next_token() { return std::get<NextTokenJob>(job_); }
  const NextTokenJob& next_token() const { return std::get<NextTokenJob>(job_); }
  ScoreJob& score() { return std::get<ScoreJob>(job_); }
  const ScoreJob& score() const { return std::get<ScoreJob>(job_); }
  EmbedJob& embed() { return std::get<EmbedJob>(job_); }
  const EmbedJob& embed() const { return std::get<EmbedJob>(job_); }
  ClassifyJob& classify() { return std::get<ClassifyJob>(job_); }
  const ClassifyJob& classify() const { return std::get<ClassifyJob>(job_); }
  GenerateJob& generate() { return std::get<GenerateJob>(job_); }
  const GenerateJob& generate() const { return std::get<GenerateJob>(job_); }

  // The caller's side, any thread: its client left, so the task is dropped wherever it is.
  void Cancel() {
    cancelled = true;
    if (cancel) cancel();
  }
  // The sink's side, any thread, after it wrote events: a stream paused because its client did
  // not read runs again once few enough of its events are unsent.
  void Resume() {
    if (resume) resume();
  }

  // The delivering side: an event, then the end, once.
  void Send(GenerationEvent event) { sink_->Send(std::move(event)); }
  void Finish(absl::Status status) { std::exchange(sink_, nullptr)->Complete(std::move(status)); }
  bool expired(absl::Time now) const { return now > deadline; }
  // Generate: events made and not yet written to the client, for backpressure; read by the
  // scheduler (under its loop's lock) as it counts a step's events and as the sink resumes the
  // task (after it wrote, also under that lock), while no end has been delivered.
  int64_t Unsent() const {
    return undelivered.load(std::memory_order_relaxed) + (sink_ != nullptr ? sink_->Unsent() : 0);
  }

 private:
  using AnyJob = std::variant<NextTokenJob, ScoreJob, EmbedJob, ClassifyJob, GenerateJob>;
  static AnyJob Job(TaskKind kind) {
    switch (kind) {
      case TaskKind::kNextToken:
        return NextTokenJob{};
      case TaskKind::kScore:
        return ScoreJob{};
      case TaskKind::kEmbed:
        return EmbedJob{};
      case TaskKind::kClassify:
        return ClassifyJob{};
      case TaskKind::kGenerate:
        break;
    }
    return GenerateJob{};
  }

  AnyJob job_;
  TaskSink* sink_;
};

}  // namespace attnserve::server
