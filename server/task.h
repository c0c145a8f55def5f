// A request on its way from a gRPC handler thread to a model's scheduler thread, and its result
// on the way back. The handler waits on the task; the scheduler fills it in. Generation results
// arrive as a stream of events.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/models/encoder.h"
#include "proto/attnserve/v1/inference.pb.h"

namespace attnserve::server {

enum class TaskKind { kNextToken, kScore, kEmbed, kGenerate };

struct GenerateOptions {
  int64_t max_tokens = 64;
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool context_limited = false;  // max_tokens was cut to what the context holds
};

struct Task {
  TaskKind kind;
  absl::Time enqueued = absl::Now();
  absl::Time deadline = absl::InfiniteFuture();
  std::atomic<bool> cancelled{false};

  // Inputs, validated by the service before the task is queued.
  TokenSequences sequences;          // NextToken, Score (one), Generate (one prompt)
  TokenSequences sources;            // encoder-decoder models: one source per sequence
  ModelInputs embed_inputs;          // Embed
  std::optional<Pooling> pooling;    // Embed; nullopt: the model's
  bool normalize = false;            // Embed
  std::vector<int64_t> head_layers;  // Embed: layers whose per-head contributions to return
  int64_t top_k = 10;                // NextToken
  float temperature = 1.0f;          // NextToken
  bool full_distribution = false;    // NextToken
  GenerateOptions generate;          // Generate

  // Results.
  absl::Mutex mutex;
  bool done ABSL_GUARDED_BY(mutex) = false;
  absl::Status status ABSL_GUARDED_BY(mutex);
  v1::NextTokenResponse next_token ABSL_GUARDED_BY(mutex);
  v1::ScoreResponse score ABSL_GUARDED_BY(mutex);
  v1::EmbedResponse embed ABSL_GUARDED_BY(mutex);
  std::deque<v1::GenerateResponse> events ABSL_GUARDED_BY(mutex);  // Generate: not yet sent

  explicit Task(TaskKind kind) : kind(kind) {}

  // Scheduler side.
  void Finish(absl::Status result) {
    absl::MutexLock lock(&mutex);
    status = std::move(result);
    done = true;
  }
  void Emit(v1::GenerateResponse event) {
    absl::MutexLock lock(&mutex);
    events.push_back(std::move(event));
  }
  bool expired(absl::Time now) const { return now > deadline; }
};

}  // namespace attnserve::server
