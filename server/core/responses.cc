#include "server/core/responses.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "server/core/sampling.h"
#include "text/tokenizer/text_stream.h"

namespace attnserve::server {
namespace {

// Wire sizes, generous: a varint field with its tag, a float with its tag, a length-delimited
// field's tag and length.
constexpr int64_t kVarint = 11, kFloat = 5, kFraming = 6;

}  // namespace

int64_t ResponseBytesBound(const Task& task, const Model& model) {
  const ModelConfig& c = model.config;
  // One token's text; a streamed piece holds those of at most TextStream::kMaxHeldTokens.
  const int64_t kTokenText = model.max_token_text_bytes;
  constexpr int64_t kEnvelope = 256;  // the model name and the message's own framing
  switch (task.kind) {
    case TaskKind::kNextToken: {
      const NextTokenJob& job = task.next_token();
      const int64_t entry = kFraming + kVarint + kFraming + kTokenText + 2 * kFloat;
      const int64_t distribution = job.full_distribution ? kFraming + 4 * c.vocab_size : 0;
      const int64_t result = kFraming + kVarint + job.top_k * entry + distribution;
      return kEnvelope + static_cast<int64_t>(job.sequences.size()) * result;
    }
    case TaskKind::kScore: {
      const int64_t entry = kFraming + kVarint + kFraming + kTokenText + kFloat;
      return kEnvelope + LongestSequence(task.score().sequences) * entry + kFloat + kFraming;
    }
    case TaskKind::kEmbed: {
      const EmbedJob& job = task.embed();
      const ModelInputs& inputs = job.inputs;
      const bool tokens = c.token_inputs();
      const int64_t batch =
          tokens ? static_cast<int64_t>(inputs.tokens.size()) : inputs.features.batch();
      int64_t floats = 0;
      int64_t longest = 0;
      for (int64_t b = 0; b < batch; ++b) {
        longest = std::max(longest, tokens ? static_cast<int64_t>(inputs.tokens[b].size())
                                           : inputs.features.lengths[b]);
      }
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t length = job.pad_token_states ? longest
                               : tokens             ? static_cast<int64_t>(inputs.tokens[b].size())
                                                    : inputs.features.lengths[b];
        // States are model_dim wide (output_dim for Perceiver IO and Set Transformer outputs).
        const int64_t width = std::max(c.model_dim, c.output_dim);
        const int64_t rows = c.num_outputs > 0                                   ? c.num_outputs
                             : c.num_seeds > 0                                   ? c.num_seeds
                             : job.pooling.value_or(c.pooling) == Pooling::kNone ? length
                                                                                 : 1;
        floats += rows * width;
        floats += static_cast<int64_t>(job.head_layers.size()) * length * c.num_heads * c.model_dim;
      }
      const int64_t messages = batch * (1 + static_cast<int64_t>(job.head_layers.size()));
      return kEnvelope + 4 * floats + messages * (4 * kFraming + 4 * kVarint);
    }
    case TaskKind::kClassify: {
      // Each label's index, name and score; the texts the answer repeats.
      int64_t label_bytes = 0;
      for (const std::string& label : c.classifier.labels) {
        label_bytes = std::max(label_bytes, static_cast<int64_t>(label.size()));
      }
      const int64_t entry = 2 * kFraming + kVarint + label_bytes + kFloat;
      const ClassifyJob& job = task.classify();
      return kEnvelope + job.echoed_bytes +
             static_cast<int64_t>(job.inputs.tokens.size()) *
                 (2 * kFraming + kVarint + c.classifier.num_labels * entry);
    }
    case TaskKind::kGenerate: {
      // Streamed one event at a time; the scheduler bounds the events waiting to be sent.
      const int64_t event = kEnvelope + kFraming + kVarint +
                            static_cast<int64_t>(TextStream::kMaxHeldTokens) * kTokenText + kFloat;
      const GenerateJob& job = task.generate();
      if (!job.collect_events) return event;
      // Collected: every token's id, text and log-probability, and its alternatives, then the
      // finish.
      const int64_t choice = kFraming + 2 * kVarint + kTokenText + kFloat;
      return event + job.options.max_tokens * (1 + job.options.top_logprobs) * choice;
    }
  }
  return kEnvelope;
}

std::vector<TokenChoice> TopChoices(const float* logits, int64_t vocab, int64_t k, float log_sum,
                                    const Tokenizer& tokenizer) {
  k = std::min(k, vocab);
  std::vector<int64_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  std::vector<TokenChoice> top(k);
  for (int64_t i = 0; i < k; ++i) {
    const float log_p = logits[order[i]] - log_sum;
    top[i] = {order[i], tokenizer.TokenText(order[i]), std::exp(log_p), log_p};
  }
  return top;
}

NextTokenRow MakeNextTokenRow(const float* raw, int64_t vocab, int64_t input_tokens,
                              const NextTokenJob& job, const Tokenizer& tokenizer) {
  thread_local std::vector<float> scaled;
  thread_local std::vector<int64_t> order;
  scaled.resize(vocab);
  order.resize(vocab);
  // Shifted by the largest logit before dividing: a tiny temperature (1e-41 passes validation)
  // then sends the others to -inf rather than every logit to ±inf and the probabilities to NaN
  // (found by tests/fuzz/request_fuzz).
  const float max = *std::max_element(raw, raw + vocab);
  for (int64_t v = 0; v < vocab; ++v) scaled[v] = (raw[v] - max) / job.temperature;
  const float lse = LogSumExp(scaled.data(), vocab);
  NextTokenRow row;
  row.input_tokens = input_tokens;
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = std::min(job.top_k, vocab);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return scaled[a] > scaled[b]; });
  row.top.resize(k);
  for (int64_t i = 0; i < k; ++i) {
    const float log_p = scaled[order[i]] - lse;
    row.top[i] = {order[i], tokenizer.TokenText(order[i]), std::exp(log_p), log_p};
  }
  if (job.full_distribution) {
    row.distribution.resize(vocab);
    for (int64_t v = 0; v < vocab; ++v) row.distribution[v] = std::exp(scaled[v] - lse);
  }
  return row;
}

ScoreResult MakeScoreResult(const Tensor& logits, const std::vector<int64_t>& ids,
                            const Tokenizer& tokenizer) {
  const int64_t vocab = logits.dim(1);
  ScoreResult result;
  for (size_t t = 1; t < ids.size(); ++t) {
    const float* row = logits.row(static_cast<int64_t>(t) - 1);
    const float log_p = row[ids[t]] - LogSumExp(row, vocab);
    result.tokens.push_back({ids[t], tokenizer.TokenText(ids[t]), log_p});
    result.total_log_probability += log_p;
  }
  return result;
}

std::vector<Embedding> MakeEmbeddings(const Tensor& output, const std::vector<int64_t>& rows,
                                      const EmbeddingShaping& shaping,
                                      const std::map<int64_t, Tensor>& contributions,
                                      const std::vector<int64_t>& lengths) {
  std::vector<Embedding> embeddings(rows.size());
  const int64_t width =
      shaping.dimensions > 0 ? std::min(shaping.dimensions, output.dim(2)) : output.dim(2);
  for (size_t b = 0; b < rows.size(); ++b) {
    Embedding& embedding = embeddings[b];
    for (const auto& [layer, per_head] : contributions) {
      // per_head: [B, T, H, dim]; this sequence's first lengths[b] tokens.
      const float* values = per_head.Select(static_cast<int64_t>(b)).data();
      embedding.head_contributions.push_back(
          {layer, per_head.dim(2), lengths[b], per_head.dim(3),
           std::vector<float>(values, values + lengths[b] * per_head.dim(2) * per_head.dim(3))});
    }
    embedding.rows = rows[b];
    embedding.width = width;
    embedding.values.reserve(rows[b] * width);
    for (int64_t r = 0; r < rows[b]; ++r) {
      const float* row = output.Select(static_cast<int64_t>(b)).row(r);
      double norm = 0.0;
      for (int64_t i = 0; i < width; ++i) norm += double(row[i]) * row[i];
      const float scale = shaping.normalize ? 1.0f / std::max(std::sqrt(norm), 1e-12) : 1.0f;
      for (int64_t i = 0; i < width; ++i) embedding.values.push_back(row[i] * scale);
    }
  }
  return embeddings;
}

}  // namespace attnserve::server
