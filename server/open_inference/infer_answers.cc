#include "server/open_inference/infer_answers.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attnserve::server {
namespace {

// The protocol's finish reasons: "max_tokens", "stop_sequence", "end_of_text", "context_full",
// "constraint_complete".
std::string FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kMaxTokens:
      return "max_tokens";
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kEndOfText:
      return "end_of_text";
    case FinishReason::kContextFull:
      return "context_full";
    case FinishReason::kConstraintComplete:
      return "constraint_complete";
  }
  return "";
}

inference::ModelInferResponse ResponseFor(const InferAnswer& answer) {
  inference::ModelInferResponse response;
  response.set_model_name(answer.model_name);
  response.set_model_version(kModelVersion);
  response.set_id(answer.id);
  return response;
}

}  // namespace

inference::ModelInferResponse InferResponse(const InferAnswer& answer,
                                            const std::vector<TokenSpan>& tokens) {
  inference::ModelInferResponse response = ResponseFor(answer);
  std::vector<int64_t> ids, offsets, special;
  std::vector<std::string> texts;
  for (const TokenSpan& token : tokens) {
    ids.push_back(token.id);
    texts.push_back(token.text);
    offsets.insert(offsets.end(), {token.start, token.end});
    special.push_back(token.special ? 1 : 0);
  }
  const int64_t n = ids.size();
  const InferOutputs& out = answer.outputs;
  out.AddIntegers("input_ids", {1, n}, ids, response);
  out.AddStrings("tokens", {1, n}, texts, response);
  out.AddIntegers("offsets", {1, n, 2}, offsets, response);
  out.AddIntegers("special_tokens_mask", {1, n}, special, response);
  return response;
}

inference::ModelInferResponse InferResponse(const InferAnswer& answer, const std::string& text) {
  inference::ModelInferResponse response = ResponseFor(answer);
  answer.outputs.AddStrings("text", {1}, std::span(&text, 1), response);
  return response;
}

inference::ModelInferResponse InferResponse(const InferAnswer& answer, Task& task) {
  inference::ModelInferResponse response = ResponseFor(answer);
  const InferOutputs& out = answer.outputs;
  switch (answer.model.method) {
    case InferMethod::kTokenize:
    case InferMethod::kDetokenize:
      break;  // answered without a task
    case InferMethod::kNextToken: {
      const std::vector<NextTokenRow>& rows = task.next_token().rows;
      const int64_t batch = rows.size();
      const int64_t k = batch > 0 ? static_cast<int64_t>(rows[0].top.size()) : 0;
      std::vector<int64_t> ids, counts;
      std::vector<std::string> texts;
      std::vector<float> probabilities, log_probabilities, distribution;
      for (const NextTokenRow& row : rows) {
        for (const TokenChoice& top : row.top) {
          ids.push_back(top.id);
          texts.push_back(top.text);
          probabilities.push_back(top.probability);
          log_probabilities.push_back(top.log_probability);
        }
        counts.push_back(row.input_tokens);
        distribution.insert(distribution.end(), row.distribution.begin(), row.distribution.end());
      }
      task.next_token().rows = {};
      out.AddIntegers("top_k_ids", {batch, k}, ids, response);
      out.AddStrings("top_k_tokens", {batch, k}, texts, response);
      out.AddFloats("top_k_probabilities", {batch, k}, probabilities, response);
      out.AddFloats("top_k_log_probabilities", {batch, k}, log_probabilities, response);
      out.AddIntegers("input_tokens", {batch}, counts, response);
      const int64_t vocab = batch > 0 ? static_cast<int64_t>(distribution.size()) / batch : 0;
      out.AddFloats("probabilities", {batch, vocab}, distribution, response);
      break;
    }
    case InferMethod::kEmbed: {
      const std::vector<Embedding>& embeddings = task.embed().embeddings;
      const int64_t batch = embeddings.size();
      const int64_t width = batch > 0 ? embeddings[0].width : 0;
      int64_t rows = 0;
      for (const Embedding& e : embeddings) rows = std::max(rows, e.rows);
      // Per-token states are zero-padded to the longest input; token_counts says how many rows
      // of each are real.
      std::vector<float> values(batch * rows * width, 0.0f);
      std::vector<int64_t> counts;
      for (int64_t b = 0; b < batch; ++b) {
        std::copy(embeddings[b].values.begin(), embeddings[b].values.end(),
                  values.begin() + b * rows * width);
        counts.push_back(embeddings[b].rows);
      }
      task.embed().embeddings = {};
      if (answer.token_states) {
        out.AddFloats("token_embeddings", {batch, rows, width}, values, response);
        out.AddIntegers("token_counts", {batch}, counts, response);
      } else {
        out.AddFloats("embedding",
                      rows == 1 ? std::vector<int64_t>{batch, width}
                                : std::vector<int64_t>{batch, rows, width},
                      values, response);
      }
      break;
    }
    case InferMethod::kClassify: {
      const ClassifyJob& job = task.classify();
      const auto batch = static_cast<int64_t>(job.scores.size());
      const int64_t labels = batch > 0 ? static_cast<int64_t>(job.scores[0].size()) : 0;
      std::vector<float> scores;
      for (const std::vector<float>& row : job.scores)
        scores.insert(scores.end(), row.begin(), row.end());
      out.AddFloats("scores", {batch, labels}, scores, response);
      std::vector<std::string> names(job.labels != nullptr ? *job.labels
                                                           : std::vector<std::string>());
      names.resize(labels);
      out.AddStrings("labels", {labels}, names, response);
      break;
    }
    case InferMethod::kScore: {
      const int64_t n = task.score().result.tokens.size();
      std::vector<int64_t> ids;
      std::vector<std::string> texts;
      std::vector<float> log_probabilities;
      for (const ScoredToken& token : task.score().result.tokens) {
        ids.push_back(token.id);
        texts.push_back(token.text);
        log_probabilities.push_back(token.log_probability);
      }
      out.AddIntegers("token_ids", {1, n}, ids, response);
      out.AddStrings("tokens", {1, n}, texts, response);
      out.AddFloats("token_log_probabilities", {1, n}, log_probabilities, response);
      const double total = task.score().result.total_log_probability;
      out.AddDoubles("total_log_probability", {1}, std::span(&total, 1), response);
      break;
    }
    case InferMethod::kGenerate: {
      std::vector<int64_t> ids;
      std::vector<std::string> texts;
      std::vector<float> log_probabilities;
      std::string text;
      GenerationEvent finish;
      for (const GenerationEvent& event : task.generate().events) {
        if (event.finished) {
          finish = event;
          continue;
        }
        ids.push_back(event.id);
        texts.push_back(event.text);
        log_probabilities.push_back(event.log_probability);
        text += event.text;
      }
      task.generate().events = {};
      text += finish.text;  // what the stream held back: the end of a cut character
      const int64_t n = ids.size();
      out.AddStrings("text_output", {1}, std::span(&text, 1), response);
      out.AddIntegers("output_ids", {1, n}, ids, response);
      out.AddStrings("output_tokens", {1, n}, texts, response);
      out.AddFloats("output_log_probabilities", {1, n}, log_probabilities, response);
      std::string reason = FinishReasonName(finish.reason);
      out.AddStrings("finish_reason", {1}, std::span(&reason, 1), response);
      const int64_t prompt_tokens = finish.prompt_tokens;
      out.AddIntegers("prompt_tokens", {1}, std::span(&prompt_tokens, 1), response);
      break;
    }
  }
  return response;
}

}  // namespace attnserve::server
