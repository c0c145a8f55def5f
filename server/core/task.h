// A request on its way from a protocol's handler to a model's engine loop, and its result on the
// way back. No thread waits for it: the engine fills in the result and hands it to the task's
// sink, the call that asked, which answers its client. Generation results go out as a stream of
// events, delivered off the engine thread (server/core/step_answers.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/architectures/activation_memory.h"
#include "engine/architectures/encoder.h"
#include "server/core/results.h"

namespace attnserve::server {

enum class TaskKind { kNextToken, kScore, kEmbed, kGenerate };

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

struct Task {
  TaskKind kind;
  absl::Time enqueued = absl::Now();
  absl::Time deadline = absl::InfiniteFuture();
  // Who asked (an API key, a connection or an address): queue places and decoding slots are
  // shared out evenly among clients.
  std::string client;
  int64_t input_tokens = 0;  // set by EngineLoop::Submit, for its completion estimate
  EngineCall call;           // set by EngineLoop::Submit: the engine call that answers it
  // Set before the task is submitted: wakes its engine loop when the task's client read
  // (`wake`), and tells it the client left (`cancel`). Any thread.
  std::function<void()> wake;
  std::function<void()> cancel;
  // The client left before the task was queued: it is refused (see Cancel).
  std::atomic<bool> cancelled{false};
  // Generate: events the engine made that are not yet handed to the sink (StepAnswers).
  std::atomic<int64_t> undelivered{0};

  // Inputs, validated by the service before the task is queued.
  TokenSequences sequences;          // NextToken, Score (one), Generate (one prompt)
  TokenSequences sources;            // encoder-decoder models: one source per sequence
  ModelInputs embed_inputs;          // Embed
  std::optional<Pooling> pooling;    // Embed; nullopt: the model's
  bool normalize = false;            // Embed
  std::vector<int64_t> head_layers;  // Embed: layers whose per-head contributions to return
  // Embed: per-token states go out padded to the longest input (an Open Inference Protocol
  // tensor), so the answer's size follows the longest, not each input's length.
  bool pad_token_states = false;
  // Generate answered in one message (an Open Inference Protocol call): its events are collected
  // here rather than streamed, so the answer's size follows max_tokens.
  bool collect_events = false;
  std::vector<GenerationEvent> events;
  // A JSON answer spells out what protobuf packs (field names, decimal floats, escaped text):
  // its bound is this many times attnserve.v1's.
  int64_t answer_scale = 1;
  int64_t top_k = 10;              // NextToken
  float temperature = 1.0f;        // NextToken
  bool full_distribution = false;  // NextToken
  GenerateOptions generate;        // Generate

  // Results of unary calls, filled in by the executor before Finish; each protocol's edge
  // builds its answer from them.
  std::vector<NextTokenRow> next_token;  // per sequence
  ScoreResult score;
  std::vector<Embedding> embeddings;  // per sequence

  // The sink outlives the task's stay in the scheduler: it is freed only after Complete.
  Task(TaskKind kind, TaskSink* sink) : kind(kind), sink_(sink) {}
  // The last holder is the call, once its answer is sent: the answer's bytes go back then.
  ~Task() {
    if (response_ledger_) response_ledger_->fetch_sub(response_bytes_);
  }
  // The most bytes its answer can take, as admitted.
  int64_t response_bytes() const { return response_bytes_; }
  // Counts `bytes` of answer against `ledger` until the task is destroyed.
  void HoldResponseBytes(std::shared_ptr<std::atomic<int64_t>> ledger, int64_t bytes) {
    response_ledger_ = std::move(ledger);
    response_bytes_ = bytes;
  }

  // The caller's side, any thread: its client left, so the task is dropped wherever it is.
  void Cancel() {
    cancelled = true;
    if (cancel) cancel();
  }

  // The delivering side: an event, then the end, once.
  void Send(GenerationEvent event) { sink_->Send(std::move(event)); }
  void Finish(absl::Status status) { std::exchange(sink_, nullptr)->Complete(std::move(status)); }
  bool expired(absl::Time now) const { return now > deadline; }
  // Generate: events made and not yet written to the client, for backpressure; read by the
  // scheduler while the task runs, when no end has been delivered.
  int64_t Unsent() const {
    return undelivered.load(std::memory_order_relaxed) + (sink_ != nullptr ? sink_->Unsent() : 0);
  }

 private:
  TaskSink* sink_;
  std::shared_ptr<std::atomic<int64_t>> response_ledger_;
  int64_t response_bytes_ = 0;
};

}  // namespace attnserve::server
