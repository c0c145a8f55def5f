#include "server/open_inference/infer_requests.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/frontend/request_validation.h"
#include "server/open_inference/infer_parameters.h"
#include "text/tokenizer/byte_tokenizer.h"

namespace attnserve::server {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// Generate's constraint, from one of its parameters: json_schema (JSON text), json_object
// (true), regex, grammar (llama.cpp's GBNF when it has `::=` rules, else Lark) or choice (a
// JSON list of strings).
absl::StatusOr<std::optional<GenerateInput::Constraint>> ReadConstraint(
    const InferParameters& parameters) {
  using Kind = structured::ConstraintSpec::Kind;
  std::vector<GenerateInput::Constraint> found;
  for (const char* name : {"json_schema", "regex", "grammar", "choice"}) {
    if (parameters.Find(name) == nullptr) continue;
    ASSIGN_OR_RETURN(std::string text, parameters.String(name));
    GenerateInput::Constraint& constraint = found.emplace_back();
    constraint.field = absl::StrCat("parameter '", name, "'");
    const std::string_view kind = name;
    if (kind == "json_schema") {
      constraint.spec = {Kind::kJsonSchema, std::move(text), {}};
    } else if (kind == "regex") {
      constraint.spec = {Kind::kRegex, std::move(text), {}};
    } else if (kind == "grammar") {
      const Kind grammar = absl::StrContains(text, "::=") ? Kind::kGbnf : Kind::kLark;
      constraint.spec = {grammar, std::move(text), {}};
    } else {
      const nlohmann::json list = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!list.is_array() || list.empty() ||
          !std::all_of(list.begin(), list.end(), [](const auto& c) { return c.is_string(); })) {
        return Invalid("parameter 'choice' must be a JSON list of strings");
      }
      constraint.spec = {Kind::kChoice, "", list.get<std::vector<std::string>>()};
    }
  }
  ASSIGN_OR_RETURN(bool json_object, parameters.Boolean("json_object"));
  if (json_object) {
    found.push_back({{Kind::kJsonObject, "", {}}, "parameter 'json_object'"});
  }
  if (found.size() > 1) {
    return Invalid(absl::StrCat(found[1].field, " cannot be given with ", found[0].field,
                                ": one constraint per request"));
  }
  if (found.empty()) return std::nullopt;
  return found.front();
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status CheckRows(const std::string& input, int64_t rows) {
  if (rows <= kMaxSequences) return absl::OkStatus();
  return Invalid(absl::StrCat("input '", input, "' has ", rows, " rows; at most ", kMaxSequences));
}

// The sequences of `prefix`text or `prefix`input_ids (with `prefix`attention_mask), one per row;
// `used` is set to the input they came from.
absl::StatusOr<std::vector<SequenceInput>> ReadSequences(const InferInputs& inputs,
                                                         const std::string& prefix,
                                                         const EngineLoop& worker,
                                                         std::string& used) {
  const std::string text = prefix + "text", ids = prefix + "input_ids",
                    mask = prefix + "attention_mask";
  const bool has_text = inputs.Has(text), has_ids = inputs.Has(ids);
  if (has_text == has_ids) {
    return Invalid(absl::StrCat(has_text ? "give either" : "give", " input '",
                                worker.model().tokenizer ? text + "' or '" : "", ids, "'",
                                has_text ? ", not both" : ""));
  }
  std::vector<SequenceInput> sequences;
  if (has_text) {
    used = text;
    if (inputs.Has(mask)) return Invalid(absl::StrCat("input '", mask, "' goes with '", ids, "'"));
    const std::vector<int64_t> shape = inputs.Shape(text);
    if (shape.empty() || shape.size() > 2 || (shape.size() == 2 && shape[1] != 1)) {
      return Invalid(absl::StrCat("input '", text, "' has shape ", ShapeText(shape),
                                  "; it takes [batch] or [batch, 1]: one text per row"));
    }
    RETURN_IF_ERROR(CheckRows(text, shape[0]));
    ASSIGN_OR_RETURN(auto texts, inputs.Strings(text));
    for (size_t i = 0; i < texts.size(); ++i) {
      if (SanitizeUtf8(texts[i]) != texts[i]) {
        return Invalid(absl::StrCat("input '", text, "' row ", i, " is not UTF-8"));
      }
      sequences.push_back(SequenceInput::Text(std::move(texts[i])));
    }
    return sequences;
  }
  used = ids;
  const std::vector<int64_t> shape = inputs.Shape(ids);
  if (shape.size() != 2) {
    return Invalid(absl::StrCat("input '", ids, "' has shape ", ShapeText(shape),
                                "; it takes [batch, tokens]"));
  }
  // Before a row is made: with no columns, any number of rows fits in an empty tensor.
  RETURN_IF_ERROR(CheckRows(ids, shape[0]));
  ASSIGN_OR_RETURN(auto values, inputs.Integers(ids));
  std::vector<int64_t> keep(values.size(), 1);
  if (inputs.Has(mask)) {
    if (inputs.Shape(mask) != shape) {
      return Invalid(absl::StrCat("input '", mask, "' has shape ", ShapeText(inputs.Shape(mask)),
                                  "; '", ids, "' has ", ShapeText(shape)));
    }
    ASSIGN_OR_RETURN(auto masked, inputs.Integers(mask));
    keep = std::move(masked);
  }
  const int64_t vocab = worker.model().config.vocab_size;
  for (int64_t row = 0; row < shape[0]; ++row) {
    std::vector<int64_t>& tokens = sequences.emplace_back(SequenceInput::Tokens({})).ids;
    for (int64_t column = 0; column < shape[1]; ++column) {
      const size_t at = row * shape[1] + column;
      if (keep[at] != 0 && keep[at] != 1) {
        return Invalid(absl::StrCat("input '", mask, "' [", row, ", ", column, "] = ", keep[at],
                                    "; a mask holds 0 (padding) or 1 (token)"));
      }
      if (keep[at] == 0) continue;
      if (values[at] < 0 || values[at] >= vocab) {
        return Invalid(absl::StrCat("input '", ids, "' [", row, ", ", column, "] = ", values[at],
                                    " is outside the vocabulary [0, ", vocab, ")"));
      }
      tokens.push_back(values[at]);
    }
  }
  return sequences;
}

// The one sequence of a method that takes one per request (`what`: "Score takes one sequence").
absl::StatusOr<SequenceInput> ReadOneSequence(const InferInputs& inputs, const std::string& prefix,
                                              const EngineLoop& worker, std::string& used,
                                              const std::string& what) {
  ASSIGN_OR_RETURN(auto sequences, ReadSequences(inputs, prefix, worker, used));
  if (sequences.size() != 1) {
    return Invalid(
        absl::StrCat("input '", used, "' has ", sequences.size(), " rows; ", what, " per request"));
  }
  return std::move(sequences.front());
}

absl::StatusOr<std::vector<FeatureSetInput>> ReadFeatureSets(const InferInputs& inputs) {
  if (!inputs.Has("features")) return Invalid("give input 'features'");
  const std::vector<int64_t> shape = inputs.Shape("features");
  if (shape.size() != 3) {
    return Invalid(absl::StrCat("input 'features' has shape ", ShapeText(shape),
                                "; it takes [batch, rows, width]"));
  }
  RETURN_IF_ERROR(CheckRows("features", shape[0]));
  ASSIGN_OR_RETURN(auto values, inputs.Floats("features"));
  std::vector<FeatureSetInput> sets;
  const int64_t set_size = shape[1] * shape[2];
  for (int64_t b = 0; b < shape[0]; ++b) {
    sets.push_back({shape[2], std::vector<float>(values.begin() + b * set_size,
                                                 values.begin() + (b + 1) * set_size)});
  }
  return sets;
}

// nullopt: the model's own.
absl::StatusOr<std::optional<Pooling>> ParsePooling(const std::string& name) {
  static constexpr std::pair<const char*, Pooling> kPoolings[] = {{"mean", Pooling::kMean},
                                                                  {"first", Pooling::kFirst},
                                                                  {"last", Pooling::kLast},
                                                                  {"pma", Pooling::kPma},
                                                                  {"none", Pooling::kNone}};
  if (name.empty()) return std::nullopt;
  for (const auto& [text, pooling] : kPoolings) {
    if (name == text) return pooling;
  }
  return Invalid(absl::StrCat("parameter 'pooling' = \"", name.substr(0, 32),
                              "\"; it is mean, first, last, pma or none"));
}

}  // namespace

absl::StatusOr<InferCall> TranslateInferRequest(const InferModel& model,
                                                const inference::ModelInferRequest& request) {
  const EngineLoop& worker = *model.worker;
  const Signature signature = SignatureOf(model);
  ASSIGN_OR_RETURN(auto inputs, InferInputs::Read(request, TensorNames(signature.inputs)));
  InferCall call;
  InferAnswer& answer = call.answer;
  answer.model = model;
  answer.id = request.id();
  answer.model_name = request.model_name();
  const InferParameters parameters(request);
  std::vector<std::string> outputs = TensorNames(signature.outputs);

  switch (model.method) {
    case InferMethod::kNextToken: {
      RETURN_IF_ERROR(parameters.OnlyThese({"top_k", "temperature"}));
      NextTokenInput& next = call.next_token;
      ASSIGN_OR_RETURN(auto top_k,
                       parameters.Integer("top_k", 0, 0, worker.model().config.vocab_size));
      next.top_k = top_k;
      ASSIGN_OR_RETURN(auto temperature, parameters.Number("temperature", 0.0));
      next.temperature = static_cast<float>(temperature);
      ASSIGN_OR_RETURN(auto sequences, ReadSequences(inputs, "", worker, answer.sequence_input));
      next.sequences = std::move(sequences);
      if (worker.model().servable->takes_sources()) {
        ASSIGN_OR_RETURN(auto sources,
                         ReadSequences(inputs, "source_", worker, answer.source_input));
        next.sources = std::move(sources);
      }
      break;
    }
    case InferMethod::kEmbed: {
      RETURN_IF_ERROR(parameters.OnlyThese({"pooling", "normalize"}));
      EmbedInput& embed = call.embed;
      ASSIGN_OR_RETURN(auto pooling_name, parameters.String("pooling"));
      ASSIGN_OR_RETURN(auto pooling, ParsePooling(pooling_name));
      embed.pooling = pooling;
      ASSIGN_OR_RETURN(auto normalize, parameters.Boolean("normalize"));
      embed.normalize = normalize;
      if (worker.model().config.token_inputs()) {
        ASSIGN_OR_RETURN(auto sequences, ReadSequences(inputs, "", worker, answer.sequence_input));
        embed.sequences = std::move(sequences);
      } else {
        answer.sequence_input = "features";
        ASSIGN_OR_RETURN(auto sets, ReadFeatureSets(inputs));
        embed.feature_sets = std::move(sets);
      }
      // Per-token states (pooling none, asked for or the model's own) come in their own tensors.
      answer.token_states = worker.model().servable->gives_token_states() &&
                            (pooling == Pooling::kNone ||
                             (!pooling && worker.model().config.pooling == Pooling::kNone));
      if (answer.token_states) {
        outputs = {"token_embeddings", "token_counts"};
      } else {
        outputs = {"embedding"};
      }
      break;
    }
    case InferMethod::kGenerate: {
      if (auto status = parameters.OnlyThese(
              {"max_tokens", "min_tokens", "ignore_eos", "temperature", "top_k", "top_p", "seed",
               "json_schema", "json_object", "regex", "grammar", "choice"});
          !status.ok()) {
        return status;
      }
      GenerateInput& generate = call.generate;
      ASSIGN_OR_RETURN(auto max_tokens,
                       parameters.Integer("max_tokens", 0, 0, worker.max_context()));
      generate.max_tokens = max_tokens;
      ASSIGN_OR_RETURN(auto min_tokens,
                       parameters.Integer("min_tokens", 0, 0, worker.max_context()));
      generate.min_tokens = min_tokens;
      ASSIGN_OR_RETURN(generate.ignore_eos, parameters.Boolean("ignore_eos"));
      ASSIGN_OR_RETURN(auto top_k,
                       parameters.Integer("top_k", 0, 0, worker.model().config.vocab_size));
      generate.top_k = top_k;
      for (const auto& [name, field] : {std::pair{"temperature", &GenerateInput::temperature},
                                        std::pair{"top_p", &GenerateInput::top_p}}) {
        ASSIGN_OR_RETURN(auto value, parameters.Number(name, 0.0));
        generate.*field = static_cast<float>(value);
      }
      if (parameters.Find("seed") != nullptr) {
        const std::optional<uint64_t> seed = parameters.Unsigned("seed");
        if (!seed) return Invalid("parameter 'seed' must be a non-negative integer");
        generate.seed = *seed;
      }
      ASSIGN_OR_RETURN(generate.constraint, ReadConstraint(parameters));
      if (inputs.Has("stop")) {
        const std::vector<int64_t> shape = inputs.Shape("stop");
        if (shape.size() != 1 || shape[0] > kMaxStopSequences) {
          return Invalid(absl::StrCat("input 'stop' has shape ", ShapeText(shape), "; it takes [n]",
                                      " with n at most ", kMaxStopSequences));
        }
        ASSIGN_OR_RETURN(auto stops, inputs.Strings("stop"));
        for (const std::string& stop : stops) {
          if (SanitizeUtf8(stop) != stop)
            return Invalid("input 'stop' holds text that is not UTF-8");
          generate.stop.push_back(stop);
        }
      }
      ASSIGN_OR_RETURN(auto prompt, ReadOneSequence(inputs, "", worker, answer.sequence_input,
                                                    "Generate takes one prompt"));
      generate.prompt = std::move(prompt);
      if (worker.model().servable->takes_sources()) {
        ASSIGN_OR_RETURN(auto source,
                         ReadOneSequence(inputs, "source_", worker, answer.source_input,
                                         "Generate takes one source"));
        generate.source = std::move(source);
      }
      break;
    }
    case InferMethod::kTokenize: {
      RETURN_IF_ERROR(parameters.OnlyThese({"omit_special_tokens"}));
      ASSIGN_OR_RETURN(auto omit, parameters.Boolean("omit_special_tokens"));
      call.tokenize.omit_special_tokens = omit;
      ASSIGN_OR_RETURN(auto text, ReadOneSequence(inputs, "", worker, answer.sequence_input,
                                                  "Tokenize takes one text"));
      call.tokenize.text = std::move(text.text);
      break;
    }
    case InferMethod::kDetokenize: {
      RETURN_IF_ERROR(parameters.OnlyThese({"skip_special_tokens"}));
      ASSIGN_OR_RETURN(auto skip, parameters.Boolean("skip_special_tokens"));
      call.detokenize.skip_special_tokens = skip;
      answer.sequence_input = "input_ids";
      if (!inputs.Has("input_ids")) return Invalid("give input 'input_ids'");
      const std::vector<int64_t> shape = inputs.Shape("input_ids");
      if (shape.size() != 2 || shape[0] != 1) {
        return Invalid(absl::StrCat("input 'input_ids' has shape ", ShapeText(shape),
                                    "; Detokenize takes [1, tokens]"));
      }
      ASSIGN_OR_RETURN(auto ids, inputs.Integers("input_ids"));
      call.detokenize.ids = std::move(ids);
      break;
    }
    case InferMethod::kClassify: {
      RETURN_IF_ERROR(parameters.OnlyThese({"raw_scores", "truncate"}));
      ClassifyInput& classify = call.classify;
      ASSIGN_OR_RETURN(classify.raw_scores, parameters.Boolean("raw_scores"));
      ASSIGN_OR_RETURN(classify.truncation.enabled, parameters.Boolean("truncate"));
      ASSIGN_OR_RETURN(auto sequences, ReadSequences(inputs, "", worker, answer.sequence_input));
      std::vector<std::string> pairs;
      if (inputs.Has("text_pair")) {
        if (answer.sequence_input != "text") {
          return Invalid("input 'text_pair' goes with 'text', not 'input_ids'");
        }
        const std::vector<int64_t> shape = inputs.Shape("text_pair");
        if (shape.size() != 1 || shape[0] != static_cast<int64_t>(sequences.size())) {
          return Invalid(absl::StrCat("input 'text_pair' has shape ", ShapeText(shape),
                                      "; it takes [", sequences.size(), "], one per text"));
        }
        ASSIGN_OR_RETURN(pairs, inputs.Strings("text_pair"));
      }
      for (size_t i = 0; i < sequences.size(); ++i) {
        classify.items.push_back({std::move(sequences[i])});
        if (!pairs.empty()) classify.items.back().pair = std::move(pairs[i]);
      }
      break;
    }
    case InferMethod::kScore: {
      RETURN_IF_ERROR(parameters.OnlyThese({}));
      ScoreInput& score = call.score;
      ASSIGN_OR_RETURN(auto sequence, ReadOneSequence(inputs, "", worker, answer.sequence_input,
                                                      "Score takes one sequence"));
      score.sequence = std::move(sequence);
      if (worker.model().servable->takes_sources()) {
        ASSIGN_OR_RETURN(auto source,
                         ReadOneSequence(inputs, "source_", worker, answer.source_input,
                                         "Score takes one source"));
        score.source = std::move(source);
      }
      break;
    }
  }
  auto selected = InferOutputs::Select(request, outputs, inputs.raw());
  if (!selected.ok()) {
    // An output the model has, but not with this pooling.
    const std::vector<std::string> all = TensorNames(signature.outputs);
    for (const auto& output : request.outputs()) {
      if (std::find(outputs.begin(), outputs.end(), output.name()) == outputs.end() &&
          std::find(all.begin(), all.end(), output.name()) != all.end()) {
        return Invalid(absl::StrCat("output '", output.name(), "' is not given with pooling ",
                                    answer.token_states ? "none" : "other than none", "; ",
                                    absl::StrJoin(outputs, " and "), " are"));
      }
    }
    return selected.status();
  }
  answer.outputs = *std::move(selected);
  call.next_token.full_distribution = answer.outputs.Wants("probabilities");
  return call;
}

std::string InferFieldNames::Name(const FieldPath& path) const {
  using Field = FieldPath::Field;
  using Part = FieldPath::Part;
  if (path.field == Field::kStop) {
    return path.row >= 0 ? absl::StrCat("input 'stop' row ", path.row) : "input 'stop'";
  }
  if (const char* parameter = ParameterName(path.field)) {
    return absl::StrCat("parameter '", parameter, "'");
  }
  const bool source = path.field == Field::kSources || path.field == Field::kSource;
  std::string name =
      absl::StrCat("input '", source ? answer_.source_input : answer_.sequence_input, "'");
  // A method that takes one sequence reads it from row 0; Detokenize's ids are row 0's columns.
  const bool one = path.field == Field::kSequence || path.field == Field::kPrompt ||
                   path.field == Field::kSource || path.field == Field::kText;
  if (path.field == Field::kIds) {
    if (path.element >= 0) absl::StrAppend(&name, " [0, ", path.element, "]");
  } else if (path.part == Part::kPairText) {
    name = absl::StrCat("input 'text_pair' row ", std::max<int64_t>(path.row, 0));
  } else if (path.part == Part::kTokenIds) {
    absl::StrAppend(&name, " [", std::max<int64_t>(path.row, 0), ", ", path.element, "]");
  } else if (path.row >= 0 || one) {
    absl::StrAppend(&name, " row ", std::max<int64_t>(path.row, 0));
  }
  if (path.part == Part::kWidth) absl::StrAppend(&name, " width");
  return name;
}

}  // namespace attnserve::server
