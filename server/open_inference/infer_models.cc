#include "server/open_inference/infer_models.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::server {
namespace {

constexpr std::pair<InferMethod, const char*> kSuffixes[] = {
    {InferMethod::kNextToken, "next_token"}, {InferMethod::kEmbed, "embed"},
    {InferMethod::kScore, "score"},          {InferMethod::kGenerate, "generate"},
    {InferMethod::kClassify, "classify"},    {InferMethod::kTokenize, "tokenize"},
    {InferMethod::kDetokenize, "detokenize"}};

bool Answers(const EngineLoop& worker, InferMethod method) {
  const std::vector<std::string> methods = SupportedMethods(worker.model());
  return std::find(methods.begin(), methods.end(), MethodName(method)) != methods.end();
}

}  // namespace

std::vector<std::string> TensorNames(const std::vector<TensorSpec>& specs) {
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
    case InferMethod::kClassify:
      // A pair's second text, beside `text`.
      if (m.tokenizer) s.inputs.push_back({"text_pair", "BYTES", {-1}});
      s.outputs = {{"scores", "FP32", {-1, config.classifier.num_labels}},
                   {"labels", "BYTES", {config.classifier.num_labels}}};
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
    case InferMethod::kClassify:
      return "Classify";
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

}  // namespace attnserve::server
