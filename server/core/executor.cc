#include "server/core/executor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/blocks/classification_head.h"
#include "server/core/responses.h"
#include "server/core/sampling.h"

namespace attnserve::server {
namespace {

// Sets the logits of the tokens `allowed` (bit t % 32 of word t / 32) does not allow to -inf;
// whether it allows any token besides end-of-text.
bool KeepAllowed(const uint32_t* allowed, const std::vector<int64_t>& end_of_text,
                 std::vector<float>& logits) {
  const auto vocab = static_cast<int64_t>(logits.size());
  int64_t kept = 0;
  for (int64_t word = 0; word * 32 < vocab; ++word) {
    const uint32_t bits = allowed[word];
    kept += std::popcount(bits);
    if (bits == ~uint32_t{0}) continue;
    for (int64_t t = word * 32; t < std::min(vocab, word * 32 + 32); ++t) {
      if (!((bits >> (t % 32)) & 1)) logits[t] = -std::numeric_limits<float>::infinity();
    }
  }
  for (int64_t eos : end_of_text) kept -= (allowed[eos / 32] >> (eos % 32)) & 1;
  return kept > 0;
}

}  // namespace

Executor::Executor(std::string name, const Model& model, ServerMetrics& metrics)
    : name_(std::move(name)),
      model_(model),
      metrics_(metrics),
      step_tokens_(metrics.step_tokens.Add({{"model", name_}})),
      prompt_tokens_(metrics.tokens.Add({{"model", name_}, {"kind", "prompt"}})),
      generated_tokens_(metrics.tokens.Add({{"model", name_}, {"kind", "generated"}})),
      first_token_(metrics.first_token.Add({{"model", name_}})),
      constraint_mask_(metrics.constraint_mask.Add({{"model", name_}})) {}

Executor::Result Executor::Run(const StepPlan& plan) {
  const absl::Time began = absl::Now();
  Result result;
  for (uint64_t id : plan.removed) generations_.erase(id);
  for (uint64_t id : plan.dropped) {
    if (auto it = generations_.find(id); it != generations_.end()) it->second.state.reset();
  }
  // Unary requests, one engine call per kind.
  std::vector<std::shared_ptr<Task>> next_token, score, embed, classify;
  for (const auto& task : plan.unary) {
    switch (task->kind) {
      case TaskKind::kNextToken:
        next_token.push_back(task);
        break;
      case TaskKind::kScore:
        score.push_back(task);
        break;
      case TaskKind::kEmbed:
        embed.push_back(task);
        break;
      case TaskKind::kClassify:
        classify.push_back(task);
        break;
      case TaskKind::kGenerate:
        break;
    }
  }
  if (!next_token.empty()) RunNextToken(next_token);
  if (!score.empty()) RunScore(score);
  if (!embed.empty()) RunEmbeds(std::move(embed));
  if (!classify.empty()) RunClassify(classify);

  // Generations: new ones, engine states for those that have none, then the decode batch and
  // the prompt chunks.
  for (Sequence* g : plan.admitted) {
    generations_.try_emplace(g->id, g->task->generate().options.seed, *model_.tokenizer, g->tokens);
    prompt_tokens_.Increment(static_cast<double>(g->prompt_tokens));
  }
  for (Sequence* g : plan.start) {
    const bool sources = model_.servable->takes_sources();
    auto state = model_.servable->Start(
        sources ? g->task->generate().sources[0] : std::vector<int64_t>(), g->table.get());
    if (!state.ok()) {
      End(*g, EngineFailure(state.status()), result);
      continue;
    }
    generations_.at(g->id).state = *std::move(state);
  }
  // Feeds of sequences whose engine state could not be started have ended already.
  const auto live = [&](const std::vector<struct Feed>& feeds) {
    std::vector<struct Feed> kept;
    for (const auto& feed : feeds) {
      const auto it = generations_.find(feed.sequence->id);
      if (it != generations_.end() && it->second.state != nullptr) kept.push_back(feed);
    }
    return kept;
  };
  if (!plan.decode.empty()) {
    const absl::Time start = absl::Now();
    Feed(live(plan.decode), result);
    result.outcome.decode_time = absl::Now() - start;
  }
  if (!plan.prefill.empty()) Feed(live(plan.prefill), result);
  result.outcome.other_time = absl::Now() - began - result.outcome.decode_time;
  return result;
}

void Executor::Feed(const std::vector<struct Feed>& feeds, Result& result) {
  if (feeds.empty()) return;
  TokenSequences tokens;
  std::vector<GenerationState*> states;
  for (const auto& feed : feeds) {
    tokens.push_back(feed.tokens);
    states.push_back(generations_.at(feed.sequence->id).state.get());
  }
  step_tokens_.Observe(static_cast<double>(TokenCount(tokens)));
  metrics_.batch_size.Add({{"model", name_}, {"method", "Generate"}})
      .Observe(static_cast<double>(feeds.size()));
  const absl::StatusOr<Tensor> logits = model_.servable->Advance(states, tokens);
  for (size_t i = 0; i < feeds.size(); ++i) {
    Sequence& g = *feeds[i].sequence;
    if (!logits.ok()) {
      End(g, EngineFailure(logits.status()), result);
      continue;
    }
    result.outcome.fed.push_back(&g);
    if (g.computed + g.feeding < static_cast<int64_t>(g.tokens.size())) continue;  // a chunk
    const float* row = logits->row(static_cast<int64_t>(i));
    if (absl::Status finite = Finite(row, logits->dim(1)); !finite.ok()) {
      End(g, std::move(finite), result);
    } else {
      Emit(g, generations_.at(g.id), row, result);
    }
  }
}

void Executor::End(Sequence& g, absl::Status status, Result& result) {
  generations_.erase(g.id);
  result.outcome.failed.push_back(&g);
  result.answers.End(g.task, std::move(status));
}

void Executor::Finish(const std::vector<FinishedGeneration>& finished, StepAnswers& answers) {
  for (const FinishedGeneration& f : finished) {
    const auto generation = generations_.find(f.id);
    answers.Event(f.task, {.finished = true,
                           .text = generation->second.text.Finish(),
                           .reason = f.reason,
                           .prompt_tokens = f.prompt_tokens,
                           .generated_tokens = f.generated_tokens});
    answers.End(f.task, absl::OkStatus());
    generations_.erase(generation);
  }
}

void Executor::Emit(Sequence& g, Generation& generation, const float* logits, Result& result) {
  const int64_t vocab = model_.config.vocab_size;
  GenerateJob& job = g.task->generate();
  const GenerateOptions& options = job.options;
  const std::vector<int64_t>& end_of_text = model_.end_of_text;
  const bool hold_end =
      (options.ignore_eos || g.generated() < options.min_tokens) && !end_of_text.empty();
  const float* drawn_from = logits;
  if (job.constraint != nullptr || hold_end) {
    // Drawn as if the tokens the constraint forbids, and end-of-text while it is held back, had
    // probability 0; the reported log-probability stays the model's.
    suppressed_.assign(logits, logits + vocab);
    bool others = true;  // tokens other than end-of-text remain
    if (job.constraint != nullptr) {
      const absl::Time start = absl::Now();
      absl::StatusOr<const uint32_t*> allowed = job.constraint->AllowedTokens();
      constraint_mask_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
      if (!allowed.ok()) {
        End(g, allowed.status(), result);
        return;
      }
      others = KeepAllowed(*allowed, end_of_text, suppressed_);
    }
    // A constraint that admits nothing but end-of-text ends the answer even before min_tokens.
    if (hold_end && others) {
      for (int64_t eos : end_of_text) suppressed_[eos] = -std::numeric_limits<float>::infinity();
    }
    drawn_from = suppressed_.data();
  }
  const int64_t id = Sample(drawn_from, vocab, options, generation.rng);
  if (g.generated() == 0) {
    first_token_.Observe(absl::ToDoubleSeconds(absl::Now() - g.task->enqueued));
  }
  if (std::find(end_of_text.begin(), end_of_text.end(), id) != end_of_text.end()) {
    result.outcome.sampled.push_back({.sequence = &g,
                                      .token = id,
                                      .end_of_text = true,
                                      .constraint_complete = false,
                                      .text = generation.text.text()});
    return;
  }
  bool complete = false;
  if (job.constraint != nullptr) {
    if (absl::Status taken = job.constraint->Consume(id); !taken.ok()) {
      End(g, std::move(taken), result);
      return;
    }
    complete = job.constraint->Complete();
  }
  generated_tokens_.Increment();
  const float log_sum = LogSumExp(logits, vocab);
  result.answers.Event(
      g.task, {.id = id,
               .text = generation.text.Push(id),
               .log_probability = logits[id] - log_sum,
               .top = options.top_logprobs > 0 ? TopChoices(logits, vocab, options.top_logprobs,
                                                            log_sum, *model_.tokenizer)
                                               : std::vector<TokenChoice>{}});
  result.outcome.sampled.push_back({.sequence = &g,
                                    .token = id,
                                    .end_of_text = false,
                                    .constraint_complete = complete,
                                    .text = generation.text.text()});
}

absl::Status Executor::Finite(const float* values, int64_t count) const {
  const int64_t bad = FirstNonFinite(values, count);
  if (bad < 0) return absl::OkStatus();
  return EngineFailure(absl::DataLossError(absl::StrCat(
      "the model computed ", std::isnan(values[bad]) ? "NaN" : "infinity",
      " for this input: its weights changed under the server, or the values overflow")));
}

absl::Status Executor::EngineFailure(const absl::Status& status) const {
  std::cerr << "attnserve: model " << name_ << ": engine error on a validated request: " << status
            << "\n";
  return absl::InternalError(absl::StrCat("the engine failed: ", status.message()));
}

void Executor::RunNextToken(const std::vector<std::shared_ptr<Task>>& tasks) {
  // Every sequence of every task, in order, through one engine batch.
  TokenSequences sequences, sources;
  for (const auto& task : tasks) {
    const NextTokenJob& job = task->next_token();
    sequences.insert(sequences.end(), job.sequences.begin(), job.sequences.end());
    sources.insert(sources.end(), job.sources.begin(), job.sources.end());
  }
  const int64_t prompt_tokens = TokenCount(sequences);
  absl::StatusOr<Tensor> logits = model_.servable->NextTokenLogits(sources, sequences);
  metrics_.batch_size.Add({{"model", name_}, {"method", "NextToken"}})
      .Observe(static_cast<double>(sequences.size()));
  prompt_tokens_.Increment(static_cast<double>(prompt_tokens));
  step_tokens_.Observe(static_cast<double>(prompt_tokens));
  if (!logits.ok()) {
    for (const auto& task : tasks) task->Finish(EngineFailure(logits.status()));
    return;
  }
  int64_t row = 0;
  for (const auto& task : tasks) {
    NextTokenJob& job = task->next_token();
    const auto rows = static_cast<int64_t>(job.sequences.size());
    if (absl::Status finite = Finite(logits->row(row), rows * logits->dim(1)); !finite.ok()) {
      row += rows;
      task->Finish(std::move(finite));
      continue;
    }
    for (const auto& ids : job.sequences) {
      job.rows.push_back(MakeNextTokenRow(logits->row(row++), logits->dim(1),
                                          static_cast<int64_t>(ids.size()), job,
                                          *model_.tokenizer));
    }
    task->Finish(absl::OkStatus());
  }
}

void Executor::RunScore(const std::vector<std::shared_ptr<Task>>& tasks) {
  TokenSequences sequences, sources;
  for (const auto& task : tasks) {
    const ScoreJob& job = task->score();
    sequences.push_back(job.sequences[0]);
    sources.insert(sources.end(), job.sources.begin(), job.sources.end());
  }
  auto logits = model_.servable->Logits(sources, sequences);
  metrics_.batch_size.Add({{"model", name_}, {"method", "Score"}})
      .Observe(static_cast<double>(sequences.size()));
  step_tokens_.Observe(static_cast<double>(TokenCount(sequences)));
  if (!logits.ok()) {
    for (const auto& task : tasks) task->Finish(EngineFailure(logits.status()));
    return;
  }
  for (size_t b = 0; b < tasks.size(); ++b) {
    prompt_tokens_.Increment(static_cast<double>(sequences[b].size()));
    const Tensor scores = logits->Select(static_cast<int64_t>(b));
    if (absl::Status finite =
            Finite(scores.data(), static_cast<int64_t>(sequences[b].size()) * scores.dim(1));
        !finite.ok()) {
      tasks[b]->Finish(std::move(finite));
      continue;
    }
    tasks[b]->score().result = MakeScoreResult(scores, sequences[b], *model_.tokenizer);
    tasks[b]->Finish(absl::OkStatus());
  }
}

void Executor::RunEmbeds(std::vector<std::shared_ptr<Task>> tasks) {
  std::map<std::optional<Pooling>, std::vector<std::shared_ptr<Task>>> shared;
  for (auto& task : tasks) {
    if (model_.config.token_inputs() && task->embed().head_layers.empty()) {
      shared[task->embed().pooling].push_back(std::move(task));
    } else {
      RunEmbed({std::move(task)});
    }
  }
  for (const auto& [pooling, group] : shared) RunEmbed(group);
}

void Executor::RunEmbed(const std::vector<std::shared_ptr<Task>>& tasks) {
  const bool tokens = model_.config.token_inputs();
  const auto sequences = [&](const Task& task) {
    const ModelInputs& inputs = task.embed().inputs;
    return tokens ? static_cast<int64_t>(inputs.tokens.size()) : inputs.features.batch();
  };
  ModelInputs merged;
  for (const auto& task : tasks) {
    if (tasks.size() == 1) break;
    const TokenSequences& own = task->embed().inputs.tokens;
    merged.tokens.insert(merged.tokens.end(), own.begin(), own.end());
  }
  const ModelInputs& inputs = tasks.size() == 1 ? tasks[0]->embed().inputs : merged;
  int64_t batch = 0, input_tokens = 0;
  for (const auto& task : tasks) {
    batch += sequences(*task);
    input_tokens += task->input_tokens;
  }
  metrics_.batch_size.Add({{"model", name_}, {"method", "Embed"}})
      .Observe(static_cast<double>(batch));
  step_tokens_.Observe(static_cast<double>(input_tokens));
  const EmbedJob& first_job = tasks[0]->embed();
  auto output = model_.servable->Embed(inputs, first_job.pooling, first_job.head_layers);
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
    task->embed().embeddings =
        MakeEmbeddings(values, rows, {task->embed().normalize, task->embed().dimensions},
                       output->contributions, lengths);
    task->Finish(absl::OkStatus());
  }
}

void Executor::RunClassify(const std::vector<std::shared_ptr<Task>>& tasks) {
  ModelInputs inputs;
  const bool typed = model_.config.token_types > 0;
  int64_t input_tokens = 0;
  for (const auto& task : tasks) {
    const ModelInputs& own = task->classify().inputs;
    inputs.tokens.insert(inputs.tokens.end(), own.tokens.begin(), own.tokens.end());
    for (size_t i = 0; typed && i < own.tokens.size(); ++i) {
      inputs.token_types.push_back(own.token_types.empty()
                                       ? std::vector<uint8_t>(own.tokens[i].size(), 0)
                                       : own.token_types[i]);
    }
    input_tokens += task->input_tokens;
  }
  metrics_.batch_size.Add({{"model", name_}, {"method", "Classify"}})
      .Observe(static_cast<double>(inputs.tokens.size()));
  step_tokens_.Observe(static_cast<double>(input_tokens));
  auto logits = model_.servable->Classify(inputs);
  if (!logits.ok()) {
    for (const auto& task : tasks) task->Finish(EngineFailure(logits.status()));
    return;
  }
  const ClassifierConfig& head = model_.config.classifier;
  int64_t row = 0;
  for (const auto& task : tasks) {
    ClassifyJob& job = task->classify();
    const auto count = static_cast<int64_t>(job.inputs.tokens.size());
    absl::Status finite = Finite(logits->row(row), count * head.num_labels);
    if (!finite.ok()) {
      row += count;
      task->Finish(std::move(finite));
      continue;
    }
    for (int64_t b = 0; b < count; ++b, ++row) {
      job.scores.push_back(ClassScores(
          logits->row(row), head.num_labels,
          job.raw_scores ? ClassifierConfig::ScoreActivation::kNone : head.score_activation));
    }
    task->Finish(absl::OkStatus());
  }
}

}  // namespace attnserve::server
