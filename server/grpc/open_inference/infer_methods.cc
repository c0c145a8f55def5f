#include "server/grpc/open_inference/infer_methods.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/frontend/request_validation.h"
#include "text/tokenizer/byte_tokenizer.h"

namespace attnserve::server {
namespace {

constexpr std::pair<InferMethod, const char*> kSuffixes[] = {
    {InferMethod::kNextToken, "next_token"}, {InferMethod::kEmbed, "embed"},
    {InferMethod::kScore, "score"},          {InferMethod::kGenerate, "generate"},
    {InferMethod::kTokenize, "tokenize"},    {InferMethod::kDetokenize, "detokenize"}};

bool Answers(const EngineLoop& worker, InferMethod method) {
  const std::vector<std::string> methods = SupportedMethods(worker.model());
  return std::find(methods.begin(), methods.end(), MethodName(method)) != methods.end();
}

struct TensorSpec {
  std::string name;
  const char* datatype;
  std::vector<int64_t> shape;
};

struct Signature {
  std::vector<TensorSpec> inputs, outputs;
};

std::vector<std::string> Names(const std::vector<TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const TensorSpec& spec : specs) names.push_back(spec.name);
  return names;
}

// Embed's pooled vectors per input, and their width (per-token states have one per token).
std::pair<int64_t, int64_t> EmbeddingShape(const ModelConfig& config) {
  if (config.architecture == "perceiver_io") return {config.num_outputs, config.output_dim};
  if (config.architecture == "set_transformer") return {config.num_seeds, config.output_dim};
  return {1, config.model_dim};
}

Signature SignatureOf(const InferModel& model) {
  const Model& m = model.worker->model();
  const ModelConfig& config = m.config;
  // Score and Generate take one sequence; the other methods a batch.
  const bool one = model.method == InferMethod::kScore || model.method == InferMethod::kGenerate;
  const int64_t batch = one ? 1 : -1;
  Signature s;
  if (model.method == InferMethod::kTokenize) {
    s.inputs = {{"text", "BYTES", {1}}};
    s.outputs = {{"input_ids", "INT64", {1, -1}},
                 {"tokens", "BYTES", {1, -1}},
                 {"offsets", "INT64", {1, -1, 2}},
                 {"special_tokens_mask", "INT64", {1, -1}}};
    return s;
  }
  if (model.method == InferMethod::kDetokenize) {
    s.inputs = {{"input_ids", "INT64", {1, -1}}};
    s.outputs = {{"text", "BYTES", {1}}};
    return s;
  }
  if (config.token_inputs()) {
    const bool sources = model.method != InferMethod::kEmbed && m.servable->takes_sources();
    for (const char* prefix : sources ? std::vector{"", "source_"} : std::vector{""}) {
      if (m.tokenizer) s.inputs.push_back({absl::StrCat(prefix, "text"), "BYTES", {batch}});
      s.inputs.push_back({absl::StrCat(prefix, "input_ids"), "INT64", {batch, -1}});
      s.inputs.push_back({absl::StrCat(prefix, "attention_mask"), "INT64", {batch, -1}});
    }
  } else {
    s.inputs.push_back({"features", "FP32", {batch, -1, config.input_dim}});
  }
  const int64_t vocab = config.vocab_size;
  switch (model.method) {
    case InferMethod::kNextToken:
      s.outputs = {
          {"top_k_ids", "INT64", {-1, -1}},          {"top_k_tokens", "BYTES", {-1, -1}},
          {"top_k_probabilities", "FP32", {-1, -1}}, {"top_k_log_probabilities", "FP32", {-1, -1}},
          {"input_tokens", "INT64", {-1}},           {"probabilities", "FP32", {-1, vocab}}};
      break;
    case InferMethod::kEmbed: {
      const auto [rows, width] = EmbeddingShape(config);
      s.outputs.push_back(
          {"embedding", "FP32",
           rows == 1 ? std::vector<int64_t>{-1, width} : std::vector<int64_t>{-1, rows, width}});
      if (m.servable->gives_token_states()) {
        s.outputs.push_back({"token_embeddings", "FP32", {-1, -1, width}});
        s.outputs.push_back({"token_counts", "INT64", {-1}});
      }
      break;
    }
    case InferMethod::kScore:
      s.outputs = {{"token_ids", "INT64", {1, -1}},
                   {"tokens", "BYTES", {1, -1}},
                   {"token_log_probabilities", "FP32", {1, -1}},
                   {"total_log_probability", "FP64", {1}}};
      break;
    case InferMethod::kTokenize:
    case InferMethod::kDetokenize:
      break;  // above
    case InferMethod::kGenerate:
      s.inputs.push_back({"stop", "BYTES", {-1}});
      s.outputs = {
          {"text_output", "BYTES", {1}},       {"output_ids", "INT64", {1, -1}},
          {"output_tokens", "BYTES", {1, -1}}, {"output_log_probabilities", "FP32", {1, -1}},
          {"finish_reason", "BYTES", {1}},     {"prompt_tokens", "INT64", {1}}};
      break;
  }
  return s;
}

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// The request's parameters, each checked against the method's.
class Parameters {
 public:
  explicit Parameters(const inference::ModelInferRequest& request) : request_(request) {}

  absl::Status OnlyThese(std::vector<std::string> known) const {
    for (const auto& [name, value] : request_.parameters()) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        return Invalid(absl::StrCat(
            "parameter '", name.substr(0, 64), "' is not one this method takes",
            known.empty() ? "; it takes none" : "; it takes " + absl::StrJoin(known, ", ")));
      }
    }
    return absl::OkStatus();
  }
  const inference::InferParameter* Find(const std::string& name) const {
    auto it = request_.parameters().find(name);
    return it == request_.parameters().end() ? nullptr : &it->second;
  }
  absl::StatusOr<int64_t> Integer(const std::string& name, int64_t absent) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return absent;
    if (p->has_int64_param()) return p->int64_param();
    if (p->has_uint64_param() &&
        p->uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(p->uint64_param());
    }
    return Invalid(absl::StrCat("parameter '", name, "' must be an integer (int64_param)"));
  }
  // An integer in [low, high].
  absl::StatusOr<int64_t> Integer(const std::string& name, int64_t absent, int64_t low,
                                  int64_t high) const {
    auto value = Integer(name, absent);
    if (value.ok() && (*value < low || *value > high)) {
      return Invalid(
          absl::StrCat("parameter '", name, "' = ", *value, " must be in [", low, ", ", high, "]"));
    }
    return value;
  }
  std::optional<uint64_t> Unsigned(const std::string& name) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return std::nullopt;
    if (p->has_uint64_param()) return p->uint64_param();
    if (p->has_int64_param() && p->int64_param() >= 0) return p->int64_param();
    return std::nullopt;
  }
  absl::StatusOr<double> Number(const std::string& name, double absent) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return absent;
    if (p->has_double_param()) return p->double_param();
    if (p->has_int64_param()) return static_cast<double>(p->int64_param());
    if (p->has_uint64_param()) return static_cast<double>(p->uint64_param());
    return Invalid(absl::StrCat("parameter '", name, "' must be a number (double_param)"));
  }
  absl::StatusOr<bool> Boolean(const std::string& name) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return false;
    if (p->has_bool_param()) return p->bool_param();
    return Invalid(absl::StrCat("parameter '", name, "' must be a boolean (bool_param)"));
  }
  absl::StatusOr<std::string> String(const std::string& name) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return std::string();
    if (p->has_string_param()) return p->string_param();
    return Invalid(absl::StrCat("parameter '", name, "' must be a string (string_param)"));
  }

 private:
  const inference::ModelInferRequest& request_;
};

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

const char* MethodName(InferMethod method) {
  switch (method) {
    case InferMethod::kGenerate:
      return "Generate";
    case InferMethod::kTokenize:
      return "Tokenize";
    case InferMethod::kDetokenize:
      return "Detokenize";
    case InferMethod::kNextToken:
      return "NextToken";
    case InferMethod::kEmbed:
      return "Embed";
    case InferMethod::kScore:
      return "Score";
  }
  return "";
}

absl::StatusOr<InferModel> FindInferModel(const ModelRepository& repository,
                                          const std::string& name) {
  const size_t slash = name.rfind('/');
  const std::string model = name.substr(0, slash);
  EngineLoop* worker = repository.Find(model);
  if (worker == nullptr) {
    return absl::NotFoundError(absl::StrCat("no model named \"", model.substr(0, 128),
                                            "\"; ListModels shows what is served"));
  }
  if (slash == std::string::npos) {
    for (InferMethod method : {InferMethod::kNextToken, InferMethod::kEmbed}) {
      if (Answers(*worker, method)) return InferModel{worker, method};
    }
  } else {
    const std::string suffix = name.substr(slash + 1);
    for (const auto& [method, text] : kSuffixes) {
      if (suffix == text && Answers(*worker, method)) return InferModel{worker, method};
    }
  }
  const std::vector<std::string> names = InferModelNames(*worker);
  return absl::NotFoundError(absl::StrCat(
      "model ", model, " has no Open Inference Protocol model named \"", name.substr(0, 128),
      "\"; it has ", names.empty() ? "none" : absl::StrJoin(names, ", ")));
}

std::vector<std::string> InferModelNames(const EngineLoop& worker) {
  std::vector<std::string> names;
  for (const auto& [method, suffix] : kSuffixes) {
    if (!Answers(worker, method)) continue;
    if (names.empty()) names.push_back(worker.name());
    names.push_back(absl::StrCat(worker.name(), "/", suffix));
  }
  return names;
}

void DescribeInferModel(const InferModel& model, inference::ModelMetadataResponse& metadata) {
  metadata.add_versions(std::string(kModelVersion));  // not the const char* overload: GCC 12 warns
                                                      // (-Wrestrict) about its inlined assign
  metadata.set_platform("attnserve_safetensors");
  const Signature signature = SignatureOf(model);
  for (const auto& [specs, tensors] : {std::pair{&signature.inputs, metadata.mutable_inputs()},
                                       std::pair{&signature.outputs, metadata.mutable_outputs()}}) {
    for (const TensorSpec& spec : *specs) {
      auto* tensor = tensors->Add();
      tensor->set_name(spec.name);
      tensor->set_datatype(spec.datatype);
      for (int64_t dim : spec.shape) tensor->add_shape(dim);
    }
  }
}

absl::StatusOr<InferCall> TranslateInferRequest(const InferModel& model,
                                                const inference::ModelInferRequest& request) {
  const EngineLoop& worker = *model.worker;
  const Signature signature = SignatureOf(model);
  ASSIGN_OR_RETURN(auto inputs, InferInputs::Read(request, Names(signature.inputs)));
  InferCall call;
  InferAnswer& answer = call.answer;
  answer.model = model;
  answer.id = request.id();
  answer.model_name = request.model_name();
  const Parameters parameters(request);
  std::vector<std::string> outputs = Names(signature.outputs);

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
              {"max_tokens", "min_tokens", "ignore_eos", "temperature", "top_k", "top_p", "seed"});
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
    const std::vector<std::string> all = Names(signature.outputs);
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
  } else if (path.part == Part::kTokenIds) {
    absl::StrAppend(&name, " [", std::max<int64_t>(path.row, 0), ", ", path.element, "]");
  } else if (path.row >= 0 || one) {
    absl::StrAppend(&name, " row ", std::max<int64_t>(path.row, 0));
  }
  if (path.part == Part::kWidth) absl::StrAppend(&name, " width");
  return name;
}

namespace {

// The protocol's finish reasons: "max_tokens", "stop_sequence", "end_of_text", "context_full".
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
      const std::vector<NextTokenRow>& rows = task.next_token;
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
      task.next_token = {};
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
      const std::vector<Embedding>& embeddings = task.embeddings;
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
      task.embeddings = {};
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
    case InferMethod::kScore: {
      const int64_t n = task.score.tokens.size();
      std::vector<int64_t> ids;
      std::vector<std::string> texts;
      std::vector<float> log_probabilities;
      for (const ScoredToken& token : task.score.tokens) {
        ids.push_back(token.id);
        texts.push_back(token.text);
        log_probabilities.push_back(token.log_probability);
      }
      out.AddIntegers("token_ids", {1, n}, ids, response);
      out.AddStrings("tokens", {1, n}, texts, response);
      out.AddFloats("token_log_probabilities", {1, n}, log_probabilities, response);
      const double total = task.score.total_log_probability;
      out.AddDoubles("total_log_probability", {1}, std::span(&total, 1), response);
      break;
    }
    case InferMethod::kGenerate: {
      std::vector<int64_t> ids;
      std::vector<std::string> texts;
      std::vector<float> log_probabilities;
      std::string text;
      GenerationEvent finish;
      for (const GenerationEvent& event : task.events) {
        if (event.finished) {
          finish = event;
          continue;
        }
        ids.push_back(event.id);
        texts.push_back(event.text);
        log_probabilities.push_back(event.log_probability);
        text += event.text;
      }
      task.events = {};
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
