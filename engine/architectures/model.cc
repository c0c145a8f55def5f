#include "engine/architectures/model.h"

#include <malloc.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/importers/gguf_importer.h"
#include "engine/importers/hf_checkpoint.h"
#include "engine/packed_weight.h"
#include "engine/weight_grid.h"
#include "text/tokenizer/byte_tokenizer.h"
#include "text/tokenizer/hf_tokenizer.h"

namespace attnserve {

namespace {

// `gguf`: the tokenizer a GGUF file describes, else the config's.
absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizer(const std::string& directory,
                                                               const ModelConfig& config,
                                                               const GgufImport* gguf,
                                                               const std::string& gguf_path) {
  if (config.tokenizer.type == "byte") {
    return std::make_shared<const ByteTokenizer>(config.tokenizer.special_tokens);
  }
  const std::string path = gguf ? gguf_path : absl::StrCat(directory, "/", config.tokenizer.file);
  ASSIGN_OR_RETURN(HfTokenizer tokenizer, gguf ? HfTokenizer::FromJson(gguf->tokenizer_json, path)
                                               : HfTokenizer::FromFile(path));
  // The model must have a row for every id the tokenizer gives.
  if (tokenizer.vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the tokenizer has ids up to ", tokenizer.vocab_size() - 1,
                     ", but the model's vocab_size is ", config.vocab_size));
  }
  return std::make_shared<const HfTokenizer>(std::move(tokenizer));
}

template <typename Architecture>
absl::StatusOr<std::unique_ptr<ServableModel>> LoadAs(const ModelConfig& config,
                                                      WeightReader& weights) {
  ASSIGN_OR_RETURN(auto loaded, Architecture::Load(config, weights));
  return std::unique_ptr<ServableModel>(std::move(loaded));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& directory,
                                                 const LoadOptions& options) {
  const MappedLargeBlocks mapped_while_loading;
  auto model = std::make_unique<Model>();
  ModelConfig config;
  std::optional<WeightReader> reader;
  std::optional<GgufImport> gguf;
  const std::string config_path = directory + "/config.json";
  ASSIGN_OR_RETURN(const std::string gguf_path, GgufFileOf(directory));
  if (!gguf_path.empty()) {
    ASSIGN_OR_RETURN(gguf, ImportGguf(gguf_path));
    config = gguf->config;
    reader.emplace(gguf_path, std::move(gguf->tensors));
    model->source = absl::StrCat(gguf_path, " (", gguf->tensor_types, ")");
  } else {
    std::ifstream config_file(config_path);
    if (!config_file) {
      return absl::NotFoundError(absl::StrCat(config_path, ": cannot be read"));
    }
    std::stringstream text;
    text << config_file.rdbuf();
    // A Hugging Face snapshot names its model_type; the engine's own format does not.
    const auto json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (IsHuggingFaceConfig(json)) {
      ASSIGN_OR_RETURN(ImportedModel imported, ImportHuggingFace(directory, json));
      config = imported.config;
      model->weight_file = imported.weight_file;
      model->source = imported.weights_path;
      reader.emplace(imported.weights_path, std::move(imported.tensors));
    } else {
      ASSIGN_OR_RETURN(config, ParseModelConfig(text.str(), config_path));
      ASSIGN_OR_RETURN(SafetensorsFile file,
                       SafetensorsFile::Open(directory + "/model.safetensors"));
      model->weight_file = file.bytes();
      model->source = file.path();
      reader.emplace(std::move(file));
    }
  }
  WeightReader& weights = *reader;
  WeightFormat format = options.weights;
  if (format.automatic && gguf && gguf->quantized_bits != 0) {
    format.quantized = true;
    format.bits = gguf->quantized_bits;
  } else if (format.automatic) {
    format.quantized = false;
  }
  config.weights = format;
  // Each matrix kept as the file stores it where a layout can (engine/weight_grid.h).
  if (format.automatic && format.quantized) format.grids = std::make_shared<WeightGrids>();
  weights.set_format(format);

  model->directory = directory;
  model->config = config;
  // Architectures by config.json's name: nothing else in the engine or the server names them.
  using Loader =
      absl::StatusOr<std::unique_ptr<ServableModel>> (*)(const ModelConfig&, WeightReader&);
  static const std::map<std::string, Loader> kArchitectures = {
      {"causal_lm", &LoadAs<CausalLM>},       {"encoder", &LoadAs<Encoder>},
      {"next_word", &LoadAs<NextWordModel>},  {"seq2seq", &LoadAs<Seq2Seq>},
      {"perceiver_io", &LoadAs<PerceiverIO>}, {"set_transformer", &LoadAs<SetTransformer>}};
  ASSIGN_OR_RETURN(model->servable, kArchitectures.at(config.architecture)(config, weights));
  RETURN_IF_ERROR(weights.CheckAllTaken());
  if (format.grids != nullptr) model->weights_as_stored = format.grids->report().Describe();
  if (config.token_inputs()) {
    ASSIGN_OR_RETURN(model->tokenizer,
                     LoadTokenizer(directory, config, gguf ? &*gguf : nullptr, gguf_path));
    for (int64_t id = 0; id < config.vocab_size; ++id) {
      model->max_token_text_bytes =
          std::max<int64_t>(model->max_token_text_bytes,
                            static_cast<int64_t>(model->tokenizer->TokenText(id).size()));
    }
    const std::string& end = config.tokenizer.end_of_text;
    model->end_of_text = config.tokenizer.end_of_text_ids;
    const int64_t end_id = model->tokenizer->TokenToId(end.empty() ? "<|endoftext|>" : end);
    if (model->end_of_text.empty() && end_id >= 0) model->end_of_text.push_back(end_id);
    if (!end.empty() && end_id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": field tokenizer.end_of_text \"", end, "\" is not a token"));
    }
    // A template that does not parse refuses the model, naming its file and line.
    if (gguf) {
      model->chat_templates = std::move(gguf->chat_templates);
    } else {
      ASSIGN_OR_RETURN(model->chat_templates, LoadChatTemplates(directory));
    }
  }
  // Every layer has a [model_dim, model_dim]-sized projection or larger (out_proj).
  model->weights_packed =
      format.quantized || PackedWeight::WorthPacking(config.model_dim, config.model_dim);
  // The float tensors the load read and quantized or packed are freed, but the engine keeps freed
  // memory for its next pass (engine/tensor.cc): hand it back once, as the load is over.
  malloc_trim(0);
  return model;
}

}  // namespace attnserve
