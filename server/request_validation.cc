#include "server/request_validation.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "server/tokenization.h"

namespace attnserve::server {
namespace {

constexpr int kMaxStopBytes = 256;

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", problem));
}

// Token ids of one sequence: text through the model's tokenizer, or ids checked against the
// vocabulary; non-empty and within the model's context.
absl::StatusOr<std::vector<int64_t>> Resolve(const v1::Sequence& sequence, const std::string& field,
                                             const ModelWorker& worker) {
  const Model& model = worker.model();
  std::vector<int64_t> ids;
  switch (sequence.input_case()) {
    case v1::Sequence::kText: {
      auto encoded = EncodeText(sequence.text(), field + ".text", worker);
      if (!encoded.ok()) return encoded.status();
      ids = *std::move(encoded);
      break;
    }
    case v1::Sequence::kTokens:
      ids.assign(sequence.tokens().ids().begin(), sequence.tokens().ids().end());
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= model.config.vocab_size) {
          return Invalid(absl::StrCat(field, ".tokens.ids[", i, "]"),
                         absl::StrCat("= ", ids[i], " is outside the vocabulary [0, ",
                                      model.config.vocab_size, ")"));
        }
      }
      break;
    case v1::Sequence::INPUT_NOT_SET:
      return Invalid(field, "has neither text nor tokens");
  }
  if (ids.empty()) return Invalid(field, "is empty");
  if (static_cast<int64_t>(ids.size()) > worker.max_context()) {
    return Invalid(field, absl::StrCat("has ", ids.size(), " tokens; model ", worker.name(),
                                       " takes at most ", worker.max_context()));
  }
  return ids;
}

absl::Status CheckTemperature(const std::string& field, float temperature) {
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 100.0f) {
    return Invalid(field, absl::StrCat("= ", temperature, " must be in [0, 100]"));
  }
  return absl::OkStatus();
}

// Encoder-decoder models take a source per sequence; other models refuse one. `field` names the
// request field; `single` marks a field holding one source rather than a list.
absl::Status ResolveSources(const google::protobuf::RepeatedPtrField<v1::Sequence>& sources,
                            const std::string& field, bool single, size_t expected,
                            const ModelWorker& worker, Task& task) {
  if (!worker.model().servable->takes_sources()) {
    if (!sources.empty()) {
      return Invalid(field, "given, but model " + worker.name() + " is not an encoder-decoder");
    }
    return absl::OkStatus();
  }
  if (sources.size() != static_cast<int>(expected)) {
    return Invalid(
        field, single ? std::string("is missing: model ") + worker.name() + " is an encoder-decoder"
                      : absl::StrCat("has ", sources.size(), " entries; model ", worker.name(),
                                     " needs one per sequence (", expected, ")"));
  }
  for (int i = 0; i < sources.size(); ++i) {
    auto ids = Resolve(sources[i], single ? field : absl::StrCat(field, "[", i, "]"), worker);
    if (!ids.ok()) return ids.status();
    task.sources.push_back(*std::move(ids));
  }
  return absl::OkStatus();
}

// An optional single source field as a list of zero or one.
google::protobuf::RepeatedPtrField<v1::Sequence> ListOf(bool present, const v1::Sequence& source) {
  google::protobuf::RepeatedPtrField<v1::Sequence> list;
  if (present) *list.Add() = source;
  return list;
}

}  // namespace

absl::Status ValidateNextToken(const v1::NextTokenRequest& request, const ModelWorker& worker,
                               Task& task) {
  if (request.sequences().empty()) return Invalid("sequences", "is empty");
  if (request.sequences_size() > kMaxSequences) {
    return Invalid("sequences", absl::StrCat("has ", request.sequences_size(), " entries; at most ",
                                             kMaxSequences));
  }
  const int64_t vocab = worker.model().config.vocab_size;
  if (request.top_k() < 0 || request.top_k() > vocab) {
    return Invalid("top_k", absl::StrCat("= ", request.top_k(), " must be in [0, ", vocab, "]"));
  }
  if (auto status = CheckTemperature("temperature", request.temperature()); !status.ok()) {
    return status;
  }
  for (int i = 0; i < request.sequences_size(); ++i) {
    auto ids = Resolve(request.sequences(i), absl::StrCat("sequences[", i, "]"), worker);
    if (!ids.ok()) return ids.status();
    task.sequences.push_back(*std::move(ids));
  }
  if (auto status =
          ResolveSources(request.sources(), "sources", false, task.sequences.size(), worker, task);
      !status.ok()) {
    return status;
  }
  task.top_k = request.top_k() > 0 ? request.top_k() : std::min<int64_t>(10, vocab);
  task.temperature = request.temperature() > 0.0f ? request.temperature() : 1.0f;
  task.full_distribution = request.full_distribution();
  return absl::OkStatus();
}

absl::Status ValidateScore(const v1::ScoreRequest& request, const ModelWorker& worker, Task& task) {
  if (!request.has_sequence()) return Invalid("sequence", "is missing");
  auto ids = Resolve(request.sequence(), "sequence", worker);
  if (!ids.ok()) return ids.status();
  task.sequences.push_back(*std::move(ids));
  return ResolveSources(ListOf(request.has_source(), request.source()), "source", true, 1, worker,
                        task);
}

absl::Status ValidateEmbed(const v1::EmbedRequest& request, const ModelWorker& worker, Task& task) {
  const Model& model = worker.model();
  const ModelConfig& config = model.config;
  if (config.token_inputs()) {
    if (!request.feature_sets().empty()) {
      return Invalid("feature_sets", "given, but model " + worker.name() + " takes token ids");
    }
    if (request.sequences().empty()) return Invalid("sequences", "is empty");
    if (request.sequences_size() > kMaxSequences) {
      return Invalid("sequences", absl::StrCat("has more than ", kMaxSequences, " entries"));
    }
    for (int i = 0; i < request.sequences_size(); ++i) {
      auto ids = Resolve(request.sequences(i), absl::StrCat("sequences[", i, "]"), worker);
      if (!ids.ok()) return ids.status();
      task.embed_inputs.tokens.push_back(*std::move(ids));
    }
  } else {
    if (!request.sequences().empty()) {
      return Invalid("sequences", "given, but model " + worker.name() + " takes feature sets");
    }
    if (request.feature_sets().empty()) return Invalid("feature_sets", "is empty");
    if (request.feature_sets_size() > kMaxSequences) {
      return Invalid("feature_sets", absl::StrCat("has more than ", kMaxSequences, " entries"));
    }
    int64_t longest = 0;
    for (int i = 0; i < request.feature_sets_size(); ++i) {
      const v1::FeatureSet& set = request.feature_sets(i);
      const std::string field = absl::StrCat("feature_sets[", i, "]");
      if (set.width() != config.input_dim) {
        return Invalid(field + ".width", absl::StrCat("= ", set.width(), "; model ", worker.name(),
                                                      " takes ", config.input_dim));
      }
      if (set.values().empty() || set.values_size() % set.width() != 0) {
        return Invalid(field + ".values",
                       absl::StrCat("holds ", set.values_size(),
                                    " floats, not a whole number of rows of ", set.width()));
      }
      for (float value : set.values()) {
        if (!std::isfinite(value)) return Invalid(field + ".values", "holds NaN or infinity");
      }
      const int64_t rows = set.values_size() / set.width();
      if (rows > worker.max_context()) {
        return Invalid(field, absl::StrCat("has ", rows, " rows; at most ", worker.max_context()));
      }
      longest = std::max(longest, rows);
    }
    const int64_t batch = request.feature_sets_size();
    PaddedBatch& features = task.embed_inputs.features;
    features.values = Tensor::Zeros({batch, longest, config.input_dim});
    for (int64_t b = 0; b < batch; ++b) {
      const v1::FeatureSet& set = request.feature_sets(b);
      std::copy(set.values().begin(), set.values().end(), features.values.Select(b).data());
      features.lengths.push_back(set.values_size() / set.width());
    }
  }
  switch (request.pooling()) {
    case v1::POOLING_DEFAULT:
      break;
    case v1::POOLING_MEAN:
    case v1::POOLING_FIRST:
    case v1::POOLING_LAST:
    case v1::POOLING_PMA:
    case v1::POOLING_NONE:
      if (!model.servable->gives_token_states()) {
        return Invalid("pooling", "applies to encoder models; " + worker.name() + " is a " +
                                      config.architecture);
      }
      if (request.pooling() == v1::POOLING_PMA && config.pooling != Pooling::kPma) {
        return Invalid("pooling", "PMA needs a model trained with PMA pooling");
      }
      task.pooling = request.pooling() == v1::POOLING_MEAN    ? Pooling::kMean
                     : request.pooling() == v1::POOLING_FIRST ? Pooling::kFirst
                     : request.pooling() == v1::POOLING_LAST  ? Pooling::kLast
                     : request.pooling() == v1::POOLING_PMA   ? Pooling::kPma
                                                              : Pooling::kNone;
      break;
    default:
      return Invalid("pooling", absl::StrCat("= ", request.pooling(), " is not a known pooling"));
  }
  if (model.servable->gives_token_states() && !task.pooling && config.pooling == Pooling::kNone) {
    task.pooling = Pooling::kNone;
  }
  task.normalize = request.normalize();
  for (int i = 0; i < request.head_contribution_layers_size(); ++i) {
    const int64_t layer = request.head_contribution_layers(i);
    const std::string field = absl::StrCat("head_contribution_layers[", i, "]");
    if (!model.servable->gives_token_states()) {
      return Invalid(
          field, "applies to encoder models; " + worker.name() + " is a " + config.architecture);
    }
    if (layer < 0 || layer >= model.servable->num_layers()) {
      return Invalid(field, absl::StrCat("= ", layer, " is not a layer of ", worker.name(), " [0, ",
                                         model.servable->num_layers(), ")"));
    }
    if (std::find(task.head_layers.begin(), task.head_layers.end(), layer) !=
        task.head_layers.end()) {
      return Invalid(field, absl::StrCat("repeats layer ", layer));
    }
    task.head_layers.push_back(layer);
  }
  return absl::OkStatus();
}

absl::Status ValidateGenerate(const v1::GenerateRequest& request, const ModelWorker& worker,
                              Task& task) {
  if (!request.has_prompt()) return Invalid("prompt", "is missing");
  auto ids = Resolve(request.prompt(), "prompt", worker);
  if (!ids.ok()) return ids.status();
  if (static_cast<int64_t>(ids->size()) >= worker.max_context()) {
    return Invalid("prompt", absl::StrCat("has ", ids->size(), " tokens and leaves no room in ",
                                          "the context of ", worker.max_context()));
  }
  if (request.max_tokens() < 0 || request.max_tokens() > worker.max_context()) {
    return Invalid("max_tokens", absl::StrCat("= ", request.max_tokens(), " must be in [0, ",
                                              worker.max_context(), "]"));
  }
  if (auto status = CheckTemperature("temperature", request.temperature()); !status.ok()) {
    return status;
  }
  const int64_t vocab = worker.model().config.vocab_size;
  if (request.top_k() < 0 || request.top_k() > vocab) {
    return Invalid("top_k", absl::StrCat("= ", request.top_k(), " must be in [0, ", vocab, "]"));
  }
  if (!std::isfinite(request.top_p()) || request.top_p() < 0.0f || request.top_p() > 1.0f) {
    return Invalid("top_p", absl::StrCat("= ", request.top_p(), " must be in [0, 1]"));
  }
  if (request.stop_size() > kMaxStopSequences) {
    return Invalid(
        "stop", absl::StrCat("has ", request.stop_size(), " entries; at most ", kMaxStopSequences));
  }
  for (int i = 0; i < request.stop_size(); ++i) {
    const std::string& stop = request.stop(i);
    if (stop.empty() || stop.size() > kMaxStopBytes) {
      return Invalid(absl::StrCat("stop[", i, "]"),
                     absl::StrCat("must hold 1 to ", kMaxStopBytes, " bytes"));
    }
  }
  GenerateOptions& options = task.generate;
  const int64_t room = worker.max_context() - static_cast<int64_t>(ids->size());
  options.max_tokens = request.max_tokens() > 0 ? request.max_tokens() : 64;
  options.context_limited = options.max_tokens > room;
  options.max_tokens = std::min(options.max_tokens, room);
  options.temperature = request.temperature();
  options.top_k = request.top_k();
  options.top_p = request.top_p() > 0.0f ? request.top_p() : 1.0f;
  options.seed = request.sampling_seed_case() == v1::GenerateRequest::kSeed
                     ? request.seed()
                     : std::random_device()();
  options.stop.assign(request.stop().begin(), request.stop().end());
  task.sequences.push_back(*std::move(ids));
  return ResolveSources(ListOf(request.has_source(), request.source()), "source", true, 1, worker,
                        task);
}

}  // namespace attnserve::server
