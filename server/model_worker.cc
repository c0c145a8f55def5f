#include "server/model_worker.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

// log Σ exp(x), stably.
float LogSumExp(const float* x, int64_t n) {
  const float max = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - max));
  return max + static_cast<float>(std::log(sum));
}

// Draws a token from logits with temperature, top-k and top-p; greedy at temperature 0.
int64_t Sample(const float* logits, int64_t vocab, const GenerateOptions& options,
               std::mt19937_64& rng) {
  if (options.temperature <= 0.0f) return std::max_element(logits, logits + vocab) - logits;
  std::vector<int64_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t keep = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  ids.resize(keep);
  std::vector<double> weights(keep);
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    // Relative to the top logit before dividing, so a tiny temperature gives weights of 1 and
    // 0, not inf - inf.
    weights[i] = std::exp((static_cast<double>(logits[ids[i]]) - logits[ids[0]]) /
                          static_cast<double>(options.temperature));
    total += weights[i];
  }
  if (options.top_p > 0.0f && options.top_p < 1.0f) {
    double cumulative = 0.0;
    int64_t cut = 0;
    while (cut < keep && cumulative < options.top_p * total) cumulative += weights[cut++];
    weights.resize(std::max<int64_t>(cut, 1));
  }
  std::discrete_distribution<int64_t> draw(weights.begin(), weights.end());
  return ids[draw(rng)];
}

// The tokens a task puts through the engine before its first answer: what its queue wait is
// estimated from.
int64_t InputTokens(const Task& task) {
  int64_t tokens = 0;
  for (const auto* sequences : {&task.sequences, &task.sources, &task.embed_inputs.tokens}) {
    for (const auto& sequence : *sequences) tokens += static_cast<int64_t>(sequence.size());
  }
  for (int64_t length : task.embed_inputs.features.lengths) tokens += length;
  return std::max<int64_t>(tokens, 1);
}

}  // namespace

ModelWorker::ModelWorker(std::string name, std::unique_ptr<Model> model, WorkerOptions options,
                         ServerMetrics& metrics)
    : name_(std::move(name)),
      model_(std::move(model)),
      options_(options),
      metrics_(metrics),
      queue_length_(metrics.queue_length.Add({{"model", name_}})),
      active_sequences_(metrics.active_sequences.Add({{"model", name_}})),
      end_of_text_(model_->tokenizer ? model_->tokenizer->SpecialId("<|endoftext|>") : -1),
      // Packed weights sit on huge pages and need no warming; walking the file would only make
      // its released pages resident again.
      weight_pages_(model_->weights_packed ? MappedBytes{} : model_->weight_file),
      thread_([this] { Run(); }) {
  metrics.queue_capacity.Add({{"model", name_}}).Set(static_cast<double>(options_.max_queue_size));
}

ModelWorker::~ModelWorker() { Drain(); }

absl::Status ModelWorker::Submit(std::shared_ptr<Task> task) {
  const int64_t tokens = InputTokens(*task);
  task->input_tokens = tokens;
  {
    std::lock_guard lock(mutex_);
    if (draining_) return absl::UnavailableError("the server is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue_size) {
      return absl::UnavailableError(absl::StrCat("model ", name_, " has ", queue_.size(),
                                                 " requests queued, its limit; retry later"));
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
      const absl::Time answered =
          completion_.Completion(now, queued, queued_tokens_, tokens, options_.max_batch_size);
      if (answered > limit && now + completion_.Alone(tokens) <= limit) {
        return absl::UnavailableError(
            absl::StrCat("model ", name_, " would answer after the request's deadline (", queued,
                         " requests queued, about ",
                         absl::FormatDuration(absl::Trunc(answered - now, absl::Milliseconds(1))),
                         " of work); retry later"));
      }
    }
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

void ModelWorker::Drain() {
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
  }
  work_ready_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::shared_ptr<Task>> ModelWorker::TakeWork() {
  if (generations_.empty() && options_.idle_spin > absl::ZeroDuration()) {
    // Meanwhile, re-cache the weights' page translations, a few pages between looks at the queue.
    constexpr int64_t kPagesPerLook = 32;
    weight_pages_.Restart();
    const absl::Time until = absl::Now() + options_.idle_spin;
    while (queued_.load(std::memory_order_acquire) <= 0 && absl::Now() < until) {
      if (weight_pages_.Step(kPagesPerLook) == 0) __builtin_ia32_pause();
    }
  }
  std::unique_lock lock(mutex_);
  const bool decoding = !generations_.empty();
  work_ready_.wait(lock, [&] { return !queue_.empty() || decoding || draining_; });
  // Nothing decoding: give a lone request a moment's company, so concurrent ones share a batch.
  if (!decoding && !queue_.empty()) {
    const absl::Time deadline = queue_.front()->enqueued + options_.max_queue_delay;
    if (absl::Now() < deadline) {
      work_ready_.wait_until(lock, absl::ToChronoTime(deadline), [&] {
        return static_cast<int64_t>(queue_.size()) >= options_.max_batch_size || draining_;
      });
    }
  }
  std::vector<std::shared_ptr<Task>> taken;
  int64_t generation_slots = options_.max_batch_size - static_cast<int64_t>(generations_.size());
  for (auto it = queue_.begin();
       it != queue_.end() && static_cast<int64_t>(taken.size()) < options_.max_batch_size;) {
    if ((*it)->kind == TaskKind::kGenerate) {
      if (generation_slots <= 0) {
        ++it;
        continue;
      }
      --generation_slots;
    }
    queued_tokens_ -= (*it)->input_tokens;
    taken.push_back(std::move(*it));
    it = queue_.erase(it);
  }
  queued_.fetch_sub(static_cast<int64_t>(taken.size()), std::memory_order_release);
  queue_length_.Set(static_cast<double>(queue_.size()));
  return taken;
}

void ModelWorker::Run() {
  omp_set_num_threads(options_.compute_threads);
  while (true) {
    std::vector<std::shared_ptr<Task>> work = TakeWork();
    {
      std::lock_guard lock(mutex_);
      if (draining_ && work.empty() && queue_.empty() && generations_.empty()) return;
    }
    const absl::Time now = absl::Now();
    int64_t tokens = 0;
    for (const auto& task : work) tokens += task->input_tokens;
    if (tokens > 0) completion_.IterationStarted(now, tokens);
    std::vector<std::shared_ptr<Task>> next_token, score, generate;
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
          RunEmbed(task);
          break;
        case TaskKind::kGenerate:
          generate.push_back(std::move(task));
          break;
      }
    }
    if (!next_token.empty()) RunNextToken(next_token);
    if (!score.empty()) RunScore(score);
    if (!generate.empty()) StartGenerations(generate);
    StepGenerations();
    completion_.IterationEnded(absl::Now());
  }
}

void ModelWorker::RunNextToken(const std::vector<std::shared_ptr<Task>>& tasks) {
  // Every sequence of every task, in order, through one engine batch.
  TokenSequences sequences, sources;
  int64_t prompt_tokens = 0;
  for (const auto& task : tasks) {
    for (const auto& ids : task->sequences) {
      sequences.push_back(ids);
      prompt_tokens += ids.size();
    }
    sources.insert(sources.end(), task->sources.begin(), task->sources.end());
  }
  absl::StatusOr<Tensor> logits;
  if (model_->seq2seq) {
    std::vector<std::unique_ptr<Seq2SeqState>> states;
    std::vector<Seq2SeqState*> pointers;
    absl::Status started;
    for (size_t i = 0; i < sequences.size() && started.ok(); ++i) {
      auto state = model_->seq2seq->Start(sources[i], static_cast<int64_t>(sequences[i].size()));
      if (state.ok()) {
        states.push_back(*std::move(state));
        pointers.push_back(states.back().get());
      } else {
        started = state.status();
      }
    }
    logits = started.ok() ? model_->seq2seq->Advance(pointers, sequences)
                          : absl::StatusOr<Tensor>(started);
  } else if (model_->causal_lm) {
    std::vector<std::unique_ptr<DecoderState>> states;
    std::vector<DecoderState*> pointers;
    for (const auto& ids : sequences) {
      states.push_back(model_->causal_lm->NewState(static_cast<int64_t>(ids.size())));
      pointers.push_back(states.back().get());
    }
    logits = model_->causal_lm->Advance(pointers, sequences);
  } else {
    logits = model_->next_word->Logits(sequences);
  }
  metrics_.batch_size.Add({{"model", name_}, {"method", "NextToken"}})
      .Observe(static_cast<double>(sequences.size()));
  metrics_.tokens.Add({{"model", name_}, {"kind", "prompt"}}).Increment(prompt_tokens);
  if (!logits.ok()) {
    for (const auto& task : tasks) task->Finish(logits.status());
    return;
  }
  const int64_t vocab = logits->dim(1);
  const ByteTokenizer& tokenizer = *model_->tokenizer;
  int64_t row = 0;
  std::vector<float> scaled(vocab);
  std::vector<int64_t> order(vocab);
  for (const auto& task : tasks) {
    v1::NextTokenResponse response;
    response.set_model(name_);
    for (const auto& ids : task->sequences) {
      const float* raw = logits->row(row++);
      // Shifted by the largest logit before dividing: a tiny temperature (1e-41 passes
      // validation) then sends the others to -inf rather than every logit to ±inf and the
      // probabilities to NaN (found by tests/fuzz/request_fuzz).
      const float max = *std::max_element(raw, raw + vocab);
      for (int64_t v = 0; v < vocab; ++v) scaled[v] = (raw[v] - max) / task->temperature;
      const float lse = LogSumExp(scaled.data(), vocab);
      v1::NextTokenResult* result = response.add_results();
      result->set_input_tokens(static_cast<int64_t>(ids.size()));
      std::iota(order.begin(), order.end(), 0);
      const int64_t k = std::min(task->top_k, vocab);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t a, int64_t b) { return scaled[a] > scaled[b]; });
      for (int64_t i = 0; i < k; ++i) {
        v1::TokenProbability* top = result->add_top();
        const float log_p = scaled[order[i]] - lse;
        top->set_id(order[i]);
        top->set_text(DisplayText(tokenizer, order[i]));
        top->set_probability(std::exp(log_p));
        top->set_log_probability(log_p);
      }
      if (task->full_distribution) {
        std::string packed(vocab * sizeof(float), '\0');
        for (int64_t v = 0; v < vocab; ++v) {
          const float p = std::exp(scaled[v] - lse);
          std::memcpy(packed.data() + v * sizeof(float), &p, sizeof(float));
        }
        result->set_distribution(std::move(packed));
      }
    }
    task->next_token = std::move(response);
    task->Finish(absl::OkStatus());
  }
}

void ModelWorker::RunScore(const std::vector<std::shared_ptr<Task>>& tasks) {
  TokenSequences sequences;
  for (const auto& task : tasks) sequences.push_back(task->sequences[0]);
  TokenSequences sources;
  for (const auto& task : tasks) {
    sources.insert(sources.end(), task->sources.begin(), task->sources.end());
  }
  auto logits = model_->seq2seq ? model_->seq2seq->Logits(sources, sequences)
                                : model_->causal_lm->Logits(sequences);
  metrics_.batch_size.Add({{"model", name_}, {"method", "Score"}})
      .Observe(static_cast<double>(sequences.size()));
  if (!logits.ok()) {
    for (const auto& task : tasks) task->Finish(logits.status());
    return;
  }
  const int64_t vocab = logits->dim(2);
  for (size_t b = 0; b < tasks.size(); ++b) {
    const std::vector<int64_t>& ids = sequences[b];
    metrics_.tokens.Add({{"model", name_}, {"kind", "prompt"}}).Increment(ids.size());
    v1::ScoreResponse response;
    response.set_model(name_);
    double total = 0.0;
    for (size_t t = 1; t < ids.size(); ++t) {
      const float* row = logits->Select(b).row(t - 1);
      const float log_p = row[ids[t]] - LogSumExp(row, vocab);
      v1::TokenScore* score = response.add_tokens();
      score->set_id(ids[t]);
      score->set_text(DisplayText(*model_->tokenizer, ids[t]));
      score->set_log_probability(log_p);
      total += log_p;
    }
    response.set_total_log_probability(total);
    tasks[b]->score = std::move(response);
    tasks[b]->Finish(absl::OkStatus());
  }
}

void ModelWorker::RunEmbed(const std::shared_ptr<Task>& task) {
  const ModelInputs& inputs = task->embed_inputs;
  const int64_t batch = model_->config.token_inputs() ? static_cast<int64_t>(inputs.tokens.size())
                                                      : inputs.features.batch();
  metrics_.batch_size.Add({{"model", name_}, {"method", "Embed"}})
      .Observe(static_cast<double>(batch));
  v1::EmbedResponse response;
  response.set_model(name_);
  // Each output: a [batch, rows, width] tensor and each sequence's row count.
  absl::StatusOr<Tensor> output;
  std::vector<int64_t> rows(batch, 1);
  std::vector<int64_t> lengths;  // tokens per sequence, for the contributions
  std::map<int64_t, Tensor> contributions;
  for (int64_t layer : task->head_layers) contributions[layer] = Tensor();
  if (model_->encoder) {
    // One encoder pass gives the states, the contributions asked for, and the pooled vectors.
    auto states = model_->encoder->States(inputs, contributions.empty() ? nullptr : &contributions);
    if (!states.ok()) {
      output = states.status();
    } else {
      lengths = states->lengths;
      if (task->pooling == Pooling::kNone) {
        rows = states->lengths;
        output = states->values;
      } else {
        auto pooled = model_->encoder->Pool(*states, task->pooling);
        if (pooled.ok()) {
          output = pooled->Reshape({batch, 1, pooled->dim(1)});
        } else {
          output = pooled.status();
        }
      }
    }
  } else {
    output = model_->perceiver_io ? model_->perceiver_io->Forward(inputs)
                                  : model_->set_transformer->Forward(inputs);
    if (output.ok()) rows.assign(batch, output->dim(1));
  }
  if (!output.ok()) {
    task->Finish(output.status());
    return;
  }
  const int64_t width = output->dim(2);
  for (int64_t b = 0; b < batch; ++b) {
    v1::Embedding* embedding = response.add_embeddings();
    for (const auto& [layer, per_head] : contributions) {
      // per_head: [B, T, H, dim]; this sequence's first lengths[b] tokens.
      v1::HeadContributions* heads = embedding->add_head_contributions();
      heads->set_layer(static_cast<int32_t>(layer));
      heads->set_heads(per_head.dim(2));
      heads->set_rows(lengths[b]);
      heads->set_width(per_head.dim(3));
      const float* values = per_head.Select(b).data();
      heads->mutable_values()->Add(values, values + lengths[b] * per_head.dim(2) * per_head.dim(3));
    }
    embedding->set_rows(rows[b]);
    embedding->set_width(width);
    for (int64_t r = 0; r < rows[b]; ++r) {
      const float* row = output->Select(b).row(r);
      double norm = 0.0;
      for (int64_t i = 0; i < width; ++i) norm += double(row[i]) * row[i];
      const float scale = task->normalize ? 1.0f / std::max(std::sqrt(norm), 1e-12) : 1.0f;
      for (int64_t i = 0; i < width; ++i) embedding->add_values(row[i] * scale);
    }
  }
  task->embed = std::move(response);
  task->Finish(absl::OkStatus());
}

void ModelWorker::StartGenerations(const std::vector<std::shared_ptr<Task>>& tasks) {
  std::vector<Generation> started;
  TokenSequences prompts;
  for (const auto& task : tasks) {
    const std::vector<int64_t>& prompt = task->sequences[0];
    const int64_t capacity = static_cast<int64_t>(prompt.size()) + task->generate.max_tokens;
    Generation generation{task, nullptr, nullptr, std::mt19937_64(task->generate.seed),
                          Utf8Stream(*model_->tokenizer)};
    if (model_->seq2seq) {
      auto state = model_->seq2seq->Start(task->sources[0], capacity);
      if (!state.ok()) {
        task->Finish(state.status());
        continue;
      }
      generation.seq2seq = *std::move(state);
    } else {
      generation.state = model_->causal_lm->NewState(capacity);
    }
    generation.prompt_tokens = static_cast<int64_t>(prompt.size());
    prompts.push_back(prompt);
    metrics_.tokens.Add({{"model", name_}, {"kind", "prompt"}}).Increment(prompt.size());
    started.push_back(std::move(generation));
  }
  if (started.empty()) return;
  std::vector<Generation*> pointers;
  for (Generation& g : started) pointers.push_back(&g);
  auto logits = Advance(pointers, prompts);
  if (!logits.ok()) {
    for (Generation& g : started) g.task->Finish(logits.status());
    return;
  }
  // Counted before the first tokens go out: a caller who has seen one sees its sequence counted.
  active_sequences_.Increment(static_cast<double>(started.size()));
  for (size_t i = 0; i < started.size(); ++i) {
    metrics_.first_token.Add({{"model", name_}})
        .Observe(absl::ToDoubleSeconds(absl::Now() - started[i].task->enqueued));
    if (Emit(started[i], logits->row(i))) generations_.push_back(std::move(started[i]));
  }
}

void ModelWorker::StepGenerations() {
  const absl::Time now = absl::Now();
  std::erase_if(generations_, [&](Generation& g) {
    if (g.task->cancelled.load()) {
      End(g, absl::CancelledError("the caller cancelled the request"));
      return true;
    }
    if (g.task->expired(now)) {
      End(g, absl::DeadlineExceededError("the deadline passed during generation"));
      return true;
    }
    return false;
  });
  if (generations_.empty()) return;
  std::vector<Generation*> pointers;
  TokenSequences next;
  for (Generation& g : generations_) {
    pointers.push_back(&g);
    next.push_back({g.next_token});
  }
  auto logits = Advance(pointers, next);
  if (!logits.ok()) {
    for (Generation& g : generations_) End(g, logits.status());
    generations_.clear();
    return;
  }
  std::vector<Generation> running;
  for (size_t i = 0; i < generations_.size(); ++i) {
    if (Emit(generations_[i], logits->row(i))) running.push_back(std::move(generations_[i]));
  }
  generations_ = std::move(running);
}

void ModelWorker::End(Generation& g, absl::Status status) {
  g.state.reset();
  g.seq2seq.reset();
  active_sequences_.Decrement();
  g.task->Finish(std::move(status));
}

absl::StatusOr<Tensor> ModelWorker::Advance(const std::vector<Generation*>& generations,
                                            const TokenSequences& tokens) {
  metrics_.batch_size.Add({{"model", name_}, {"method", "Generate"}})
      .Observe(static_cast<double>(generations.size()));
  if (model_->seq2seq) {
    std::vector<Seq2SeqState*> states;
    for (Generation* g : generations) states.push_back(g->seq2seq.get());
    return model_->seq2seq->Advance(states, tokens);
  }
  std::vector<DecoderState*> states;
  for (Generation* g : generations) states.push_back(g->state.get());
  return model_->causal_lm->Advance(states, tokens);
}

bool ModelWorker::Emit(Generation& g, const float* logits) {
  const int64_t vocab = model_->config.vocab_size;
  const int64_t id = Sample(logits, vocab, g.task->generate, g.rng);
  auto finish = [&](v1::FinishReason reason) {
    v1::GenerateResponse event;
    event.mutable_finish()->set_reason(reason);
    event.mutable_finish()->set_prompt_tokens(g.prompt_tokens);
    event.mutable_finish()->set_generated_tokens(g.generated);
    g.task->Emit(std::move(event));
    End(g, absl::OkStatus());
    return false;
  };
  if (id == end_of_text_) return finish(v1::FINISH_REASON_END_OF_TEXT);
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
    if (absl::EndsWith(g.text.bytes(), stop)) return finish(v1::FINISH_REASON_STOP_SEQUENCE);
  }
  g.next_token = id;
  return true;
}

}  // namespace attnserve::server
