// Runs the scheduler's plan for one step on the model (ServableModel): unary requests in
// batches, answered here; generations' engine states, their prompt chunks and decode tokens in
// one engine call each, then a token sampled (server/core/sampling.h) and its text
// (text/tokenizer/text_stream.h) streamed for each generation fed in full. Scheduler thread
// only; it decides nothing about what runs or when a generation ends.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/architectures/model.h"
#include "server/core/scheduler.h"
#include "server/core/step_answers.h"
#include "server/core/task.h"
#include "server/ops/server_metrics.h"
#include "text/tokenizer/text_stream.h"

namespace attnserve::server {

class Executor {
 public:
  Executor(std::string name, const Model& model, ServerMetrics& metrics);

  struct Result {
    StepOutcome outcome;  // for Scheduler::Update, with the calls' times
    // Generations' events and ends, to be delivered once the scheduler has freed their blocks.
    StepAnswers answers;
  };
  Result Run(const StepPlan& plan);
  // The last events of the generations the scheduler ended at Update, with the rest of their
  // text, and their ends.
  void Finish(const std::vector<FinishedGeneration>& finished, StepAnswers& answers);

  // An engine failure on a validated request: the server's fault, logged, INTERNAL.
  absl::Status EngineFailure(const absl::Status& status) const;

 private:
  // What a generation keeps beside the scheduler's Sequence: its engine state (dropped on
  // preemption), its sampler and its text, which continue across preemptions.
  struct Generation {
    Generation(uint64_t seed, const Tokenizer& tokenizer, const std::vector<int64_t>& prompt)
        : rng(seed), text(tokenizer, prompt) {}
    std::unique_ptr<GenerationState> state;
    std::mt19937_64 rng;
    TextStream text;
  };

  void RunNextToken(const std::vector<std::shared_ptr<Task>>& tasks);
  void RunScore(const std::vector<std::shared_ptr<Task>>& tasks);
  // Embed requests of token inputs with the same pooling and no per-head contributions share
  // an engine call; the others run alone.
  void RunEmbeds(std::vector<std::shared_ptr<Task>> tasks);
  void RunEmbed(const std::vector<std::shared_ptr<Task>>& tasks);
  // Classify requests share one engine call (which runs their sequences by length).
  void RunClassify(const std::vector<std::shared_ptr<Task>>& tasks);
  // Feeds one batch, then samples for the sequences fed in full.
  void Feed(const std::vector<Feed>& feeds, Result& result);
  // Samples from one row of logits and streams the token (an end-of-text token has no text to
  // stream); the scheduler decides whether the generation ends there.
  void Emit(Sequence& sequence, Generation& generation, const float* logits, Result& result);
  void End(Sequence& sequence, absl::Status status, Result& result);
  // An engine failure when the values an answer is made of hold NaN or infinity: never OK.
  absl::Status Finite(const float* values, int64_t count) const;

  const std::string name_;
  const Model& model_;
  ServerMetrics& metrics_;
  prometheus::Histogram& step_tokens_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Histogram& first_token_;
  prometheus::Histogram& constraint_mask_;
  std::unordered_map<uint64_t, Generation> generations_;
  std::vector<float> suppressed_;  // a logits row without end-of-text, for ignore_eos/min_tokens
};

}  // namespace attnserve::server
