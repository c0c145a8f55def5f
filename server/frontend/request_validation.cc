#include "server/frontend/request_validation.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/frontend/field_error.h"
#include "server/frontend/tokenization.h"

namespace attnserve::server {

using Field = FieldPath::Field;
using Part = FieldPath::Part;

const char* ParameterName(FieldPath::Field field) {
  switch (field) {
    case Field::kTopK:
      return "top_k";
    case Field::kTemperature:
      return "temperature";
    case Field::kTopP:
      return "top_p";
    case Field::kMaxTokens:
      return "max_tokens";
    case Field::kMinTokens:
      return "min_tokens";
    case Field::kTopLogprobs:
      return "top_logprobs";
    case Field::kPooling:
      return "pooling";
    case Field::kHeadLayers:
      return "head_contribution_layers";
    case Field::kDimensions:
      return "dimensions";
    case Field::kPromptName:
      return "prompt_name";
    case Field::kSequences:
    case Field::kSequence:
    case Field::kPrompt:
    case Field::kSources:
    case Field::kSource:
    case Field::kFeatureSets:
    case Field::kText:
    case Field::kIds:
    case Field::kStop:
    case Field::kQuery:
    case Field::kDocuments:
      break;
  }
  return nullptr;
}

absl::Status InvalidField(const FieldNames& names, const FieldPath& path,
                          absl::string_view problem) {
  return FieldError(names.Name(path), problem);
}

namespace {

constexpr int kMaxStopBytes = 256;
// As OpenAI's API allows.
constexpr int64_t kMaxTopLogprobs = 20;

// Token ids of one sequence: text through the model's tokenizer (cut to the context when
// `truncation` says so), or ids checked against the vocabulary; non-empty and within the
// model's context.
absl::StatusOr<std::vector<int64_t>> Resolve(const SequenceInput& sequence, FieldPath path,
                                             const FieldNames& names, const EngineLoop& worker,
                                             const TextTruncation& truncation = {}) {
  const Model& model = worker.model();
  std::vector<int64_t> ids;
  switch (sequence.kind) {
    case SequenceInput::Kind::kText: {
      if (truncation.enabled && sequence.add_special_tokens) {
        ASSIGN_OR_RETURN(Encoding encoded,
                         EncodeInput(sequence.text, nullptr, truncation, path, names, worker));
        ids = std::move(encoded.ids);
        break;
      }
      ASSIGN_OR_RETURN(auto encoded, EncodeText(sequence.text, {path.field, path.row, Part::kText},
                                                names, worker, sequence.add_special_tokens));
      ids = std::move(encoded);
      break;
    }
    case SequenceInput::Kind::kTokens:
      ids = sequence.ids;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= model.config.vocab_size) {
          return InvalidField(names,
                              {path.field, path.row, Part::kTokenIds, static_cast<int64_t>(i)},
                              absl::StrCat("= ", ids[i], " is outside the vocabulary [0, ",
                                           model.config.vocab_size, ")"));
        }
      }
      break;
    case SequenceInput::Kind::kMissing:
      return InvalidField(names, path, "has neither text nor tokens");
  }
  if (ids.empty()) return InvalidField(names, path, "is empty");
  if (static_cast<int64_t>(ids.size()) > worker.max_context()) {
    return InvalidField(names, path,
                        absl::StrCat("has ", ids.size(), " tokens; model ", worker.name(),
                                     " takes at most ", worker.max_context()));
  }
  return ids;
}

absl::Status CheckTemperature(const FieldNames& names, float temperature) {
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 100.0f) {
    return InvalidField(names, {Field::kTemperature},
                        absl::StrCat("= ", temperature, " must be in [0, 100]"));
  }
  return absl::OkStatus();
}

absl::Status CheckTopK(const FieldNames& names, int64_t top_k, const EngineLoop& worker) {
  const int64_t vocab = worker.model().config.vocab_size;
  if (top_k < 0 || top_k > vocab) {
    return InvalidField(names, {Field::kTopK},
                        absl::StrCat("= ", top_k, " must be in [0, ", vocab, "]"));
  }
  return absl::OkStatus();
}

// Encoder-decoder models take a source per sequence; other models refuse one. `field` holds a
// list of them, or one (`single`).
absl::Status ResolveSources(const std::vector<SequenceInput>& sources, Field field, bool single,
                            size_t expected, const FieldNames& names, const EngineLoop& worker,
                            TokenSequences& resolved) {
  if (!worker.model().servable->takes_sources()) {
    if (!sources.empty()) {
      return InvalidField(names, {field},
                          "given, but model " + worker.name() + " is not an encoder-decoder");
    }
    return absl::OkStatus();
  }
  if (sources.size() != expected) {
    return InvalidField(
        names, {field},
        single ? std::string("is missing: model ") + worker.name() + " is an encoder-decoder"
               : absl::StrCat("has ", sources.size(), " entries; model ", worker.name(),
                              " needs one per sequence (", expected, ")"));
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    const FieldPath path{field, single ? -1 : static_cast<int64_t>(i)};
    ASSIGN_OR_RETURN(auto ids, Resolve(sources[i], path, names, worker));
    resolved.push_back(std::move(ids));
  }
  return absl::OkStatus();
}

std::vector<SequenceInput> ListOf(const std::optional<SequenceInput>& source) {
  return source ? std::vector<SequenceInput>{*source} : std::vector<SequenceInput>{};
}

// " (a, b)": its prompts' names; or ", which has none".
std::string PromptNames(const ModelConfig& config) {
  if (config.prompts.empty()) return ", which has none";
  std::vector<std::string> names;
  for (const auto& [name, text] : config.prompts) names.push_back(name);
  return absl::StrCat(" (", absl::StrJoin(names, ", "), ")");
}

absl::Status CheckCount(const FieldNames& names, Field field, size_t count,
                        size_t most = kMaxSequences) {
  if (count == 0) return InvalidField(names, {field}, "is empty");
  if (count > most) {
    return InvalidField(names, {field}, absl::StrCat("has ", count, " entries; at most ", most));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateNextToken(const NextTokenInput& input, const FieldNames& names,
                               const EngineLoop& worker, Task& task) {
  NextTokenJob& job = task.next_token();
  RETURN_IF_ERROR(CheckCount(names, Field::kSequences, input.sequences.size()));
  RETURN_IF_ERROR(CheckTopK(names, input.top_k, worker));
  RETURN_IF_ERROR(CheckTemperature(names, input.temperature));
  for (size_t i = 0; i < input.sequences.size(); ++i) {
    ASSIGN_OR_RETURN(
        auto ids,
        Resolve(input.sequences[i], {Field::kSequences, static_cast<int64_t>(i)}, names, worker));
    job.sequences.push_back(std::move(ids));
  }
  if (auto status = ResolveSources(input.sources, Field::kSources, false, job.sequences.size(),
                                   names, worker, job.sources);
      !status.ok()) {
    return status;
  }
  const int64_t vocab = worker.model().config.vocab_size;
  job.top_k = input.top_k > 0 ? input.top_k : std::min<int64_t>(10, vocab);
  job.temperature = input.temperature > 0.0f ? input.temperature : 1.0f;
  job.full_distribution = input.full_distribution;
  return absl::OkStatus();
}

absl::Status ValidateScore(const ScoreInput& input, const FieldNames& names,
                           const EngineLoop& worker, Task& task) {
  ScoreJob& job = task.score();
  if (input.sequence.kind == SequenceInput::Kind::kMissing) {
    return InvalidField(names, {Field::kSequence}, "is missing");
  }
  ASSIGN_OR_RETURN(auto ids, Resolve(input.sequence, {Field::kSequence}, names, worker));
  job.sequences.push_back(std::move(ids));
  return ResolveSources(ListOf(input.source), Field::kSource, true, 1, names, worker, job.sources);
}

absl::Status ValidateEmbed(const EmbedInput& input, const FieldNames& names,
                           const EngineLoop& worker, Task& task) {
  EmbedJob& job = task.embed();
  const Model& model = worker.model();
  const ModelConfig& config = model.config;
  if (config.token_inputs()) {
    if (!input.feature_sets.empty()) {
      return InvalidField(names, {Field::kFeatureSets},
                          "given, but model " + worker.name() + " takes token ids");
    }
    RETURN_IF_ERROR(CheckCount(names, Field::kSequences, input.sequences.size()));
    const std::string& prompt_name =
        input.prompt_name.empty() ? config.default_prompt_name : input.prompt_name;
    const auto prompt = config.prompts.find(prompt_name);
    if (!prompt_name.empty() && prompt == config.prompts.end()) {
      return InvalidField(names, {Field::kPromptName},
                          absl::StrCat("\"", prompt_name.substr(0, 128), "\" is not a prompt of ",
                                       worker.name(), PromptNames(config)));
    }
    for (size_t i = 0; i < input.sequences.size(); ++i) {
      const SequenceInput& sequence = input.sequences[i];
      const bool prompted = !prompt_name.empty() && sequence.kind == SequenceInput::Kind::kText;
      ASSIGN_OR_RETURN(
          auto ids,
          Resolve(prompted ? SequenceInput::Text(prompt->second + sequence.text) : sequence,
                  {Field::kSequences, static_cast<int64_t>(i)}, names, worker, input.truncation));
      job.inputs.tokens.push_back(std::move(ids));
    }
  } else {
    if (!input.sequences.empty()) {
      return InvalidField(names, {Field::kSequences},
                          "given, but model " + worker.name() + " takes feature sets");
    }
    if (auto status = CheckCount(names, Field::kFeatureSets, input.feature_sets.size());
        !status.ok()) {
      return status;
    }
    int64_t longest = 0;
    for (size_t i = 0; i < input.feature_sets.size(); ++i) {
      const FeatureSetInput& set = input.feature_sets[i];
      const auto row = static_cast<int64_t>(i);
      if (set.width != config.input_dim) {
        return InvalidField(
            names, {Field::kFeatureSets, row, Part::kWidth},
            absl::StrCat("= ", set.width, "; model ", worker.name(), " takes ", config.input_dim));
      }
      const auto count = static_cast<int64_t>(set.values.size());
      if (count == 0 || count % set.width != 0) {
        return InvalidField(
            names, {Field::kFeatureSets, row, Part::kValues},
            absl::StrCat("holds ", count, " floats, not a whole number of rows of ", set.width));
      }
      for (float value : set.values) {
        if (!std::isfinite(value)) {
          return InvalidField(names, {Field::kFeatureSets, row, Part::kValues},
                              "holds NaN or infinity");
        }
      }
      const int64_t rows = count / set.width;
      if (rows > worker.max_context()) {
        return InvalidField(names, {Field::kFeatureSets, row},
                            absl::StrCat("has ", rows, " rows; at most ", worker.max_context()));
      }
      longest = std::max(longest, rows);
    }
    const auto batch = static_cast<int64_t>(input.feature_sets.size());
    PaddedBatch& features = job.inputs.features;
    features.values = Tensor::Zeros({batch, longest, config.input_dim});
    for (int64_t b = 0; b < batch; ++b) {
      const FeatureSetInput& set = input.feature_sets[b];
      std::copy(set.values.begin(), set.values.end(), features.values.Select(b).data());
      features.lengths.push_back(static_cast<int64_t>(set.values.size()) / set.width);
    }
  }
  // Pooling, dimensions and head contributions shape an encoder's states.
  const auto not_an_encoder = [&](const FieldPath& path) {
    return InvalidField(
        names, path,
        "applies to encoder models; " + worker.name() + " is a " + config.architecture);
  };
  const bool encoder = model.servable->gives_token_states();
  if (input.pooling) {
    if (!encoder) return not_an_encoder({Field::kPooling});
    if (*input.pooling == Pooling::kPma && config.pooling != Pooling::kPma) {
      return InvalidField(names, {Field::kPooling}, "PMA needs a model trained with PMA pooling");
    }
    job.pooling = input.pooling;
  }
  if (encoder && !job.pooling && config.pooling == Pooling::kNone) {
    job.pooling = Pooling::kNone;
  }
  job.normalize = input.normalize;
  if (input.dimensions != 0) {
    if (!encoder) return not_an_encoder({Field::kDimensions});
    if (input.dimensions < 1 || input.dimensions > config.model_dim) {
      return InvalidField(names, {Field::kDimensions},
                          absl::StrCat("= ", input.dimensions, " is not in [1, ", config.model_dim,
                                       "], the widths of ", worker.name(), "'s embeddings"));
    }
    job.dimensions = input.dimensions;
  }
  for (size_t i = 0; i < input.head_layers.size(); ++i) {
    const int64_t layer = input.head_layers[i];
    const FieldPath path{Field::kHeadLayers, static_cast<int64_t>(i)};
    if (!encoder) return not_an_encoder(path);
    if (layer < 0 || layer >= model.servable->num_layers()) {
      return InvalidField(names, path,
                          absl::StrCat("= ", layer, " is not a layer of ", worker.name(), " [0, ",
                                       model.servable->num_layers(), ")"));
    }
    if (std::find(job.head_layers.begin(), job.head_layers.end(), layer) != job.head_layers.end()) {
      return InvalidField(names, path, absl::StrCat("repeats layer ", layer));
    }
    job.head_layers.push_back(layer);
  }
  return absl::OkStatus();
}

absl::Status ValidateClassify(const ClassifyInput& input, const FieldNames& names,
                              const EngineLoop& worker, Task& task) {
  ClassifyJob& job = task.classify();
  RETURN_IF_ERROR(CheckCount(names, Field::kSequences, input.items.size(), kMaxClassifyItems));
  const bool typed = worker.model().config.token_types > 0;
  for (size_t i = 0; i < input.items.size(); ++i) {
    const ClassifyInput::Item& item = input.items[i];
    const FieldPath path{Field::kSequences, static_cast<int64_t>(i)};
    if (!item.pair) {
      ASSIGN_OR_RETURN(auto ids, Resolve(item.text, path, names, worker, input.truncation));
      if (typed) job.inputs.token_types.emplace_back(ids.size(), 0);
      job.inputs.tokens.push_back(std::move(ids));
      continue;
    }
    if (item.text.kind != SequenceInput::Kind::kText) {
      return InvalidField(names, path, "is the first of a pair: it must be text, not token ids");
    }
    ASSIGN_OR_RETURN(Encoding encoding, EncodeInput(item.text.text, &*item.pair, input.truncation,
                                                    path, names, worker));
    if (static_cast<int64_t>(encoding.size()) > worker.max_context()) {
      return InvalidField(
          names, path,
          absl::StrCat("has ", encoding.size(), " tokens as a pair; model ", worker.name(),
                       " takes at most ", worker.max_context(), " (or ask for truncation)"));
    }
    if (typed) job.inputs.token_types.push_back(std::move(encoding.type_ids));
    job.inputs.tokens.push_back(std::move(encoding.ids));
  }
  job.raw_scores = input.raw_scores;
  job.echoed_bytes = input.echoed_bytes;
  job.labels = &worker.model().config.classifier.labels;
  return absl::OkStatus();
}

absl::Status ValidateGenerate(const GenerateInput& input, const FieldNames& names,
                              const EngineLoop& worker, Task& task) {
  GenerateJob& job = task.generate();
  if (input.prompt.kind == SequenceInput::Kind::kMissing) {
    return InvalidField(names, {Field::kPrompt}, "is missing");
  }
  ASSIGN_OR_RETURN(auto ids, Resolve(input.prompt, {Field::kPrompt}, names, worker));
  if (static_cast<int64_t>(ids.size()) >= worker.max_context()) {
    return InvalidField(names, {Field::kPrompt},
                        absl::StrCat("has ", ids.size(), " tokens and leaves no room in ",
                                     "the context of ", worker.max_context()));
  }
  if (input.max_tokens < 0 || input.max_tokens > worker.max_context()) {
    return InvalidField(
        names, {Field::kMaxTokens},
        absl::StrCat("= ", input.max_tokens, " must be in [0, ", worker.max_context(), "]"));
  }
  RETURN_IF_ERROR(CheckTemperature(names, input.temperature));
  RETURN_IF_ERROR(CheckTopK(names, input.top_k, worker));
  if (!std::isfinite(input.top_p) || input.top_p < 0.0f || input.top_p > 1.0f) {
    return InvalidField(names, {Field::kTopP},
                        absl::StrCat("= ", input.top_p, " must be in [0, 1]"));
  }
  if (input.stop.size() > kMaxStopSequences) {
    return InvalidField(
        names, {Field::kStop},
        absl::StrCat("has ", input.stop.size(), " entries; at most ", kMaxStopSequences));
  }
  for (size_t i = 0; i < input.stop.size(); ++i) {
    const std::string& stop = input.stop[i];
    if (stop.empty() || stop.size() > kMaxStopBytes) {
      return InvalidField(names, {Field::kStop, static_cast<int64_t>(i)},
                          absl::StrCat("must hold 1 to ", kMaxStopBytes, " bytes"));
    }
  }
  if (input.top_logprobs < 0 || input.top_logprobs > kMaxTopLogprobs) {
    return InvalidField(
        names, {Field::kTopLogprobs},
        absl::StrCat("= ", input.top_logprobs, " must be in [0, ", kMaxTopLogprobs, "]"));
  }
  GenerateOptions& options = job.options;
  options.top_logprobs = input.top_logprobs;
  const int64_t room = worker.max_context() - static_cast<int64_t>(ids.size());
  options.max_tokens = input.max_tokens > 0 ? input.max_tokens : 64;
  if (input.min_tokens < 0 || input.min_tokens > options.max_tokens) {
    return InvalidField(names, {Field::kMinTokens},
                        absl::StrCat("= ", input.min_tokens,
                                     " must be in [0, max_tokens = ", options.max_tokens, "]"));
  }
  options.ignore_eos = input.ignore_eos;
  options.min_tokens = input.min_tokens;
  options.context_limited = options.max_tokens > room;
  options.max_tokens = std::min(options.max_tokens, room);
  options.temperature = input.temperature;
  options.top_k = input.top_k;
  options.top_p = input.top_p > 0.0f ? input.top_p : 1.0f;
  options.seed = input.seed ? *input.seed : std::random_device()();
  options.stop = input.stop;
  if (input.constraint) {
    absl::StatusOr<std::unique_ptr<structured::TokenMatcher>> matcher =
        worker.constraints().Compile(input.constraint->spec);
    if (!matcher.ok()) {
      if (matcher.status().code() != absl::StatusCode::kInvalidArgument) return matcher.status();
      return FieldError(input.constraint->field,
                        absl::StrCat("is refused: ", matcher.status().message()));
    }
    job.constraint = *std::move(matcher);
  }
  job.sequences.push_back(std::move(ids));
  return ResolveSources(ListOf(input.source), Field::kSource, true, 1, names, worker, job.sources);
}

}  // namespace attnserve::server
