#include "engine/importers/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/importers/hf_importers.h"

namespace attnserve {
namespace {

using Json = nlohmann::json;

// json[key] if it is a string or a boolean (value() would throw on another type).
std::string StringField(const Json& json, const std::string& key) {
  const auto it = json.find(key);
  return it != json.end() && it->is_string() ? it->get<std::string>() : "";
}
bool BoolField(const Json& json, const std::string& key) {
  const auto it = json.find(key);
  return it != json.end() && it->is_boolean() && it->get<bool>();
}

// sentence_bert_config.json's max_seq_length: sentence-transformers truncates longer inputs,
// so the model is served with that context (longer ones are refused, not silently cut).
absl::Status ReadMaxSequenceLength(const std::string& directory, ImportedModel& model) {
  const std::string path = directory + "/sentence_bert_config.json";
  if (!std::filesystem::exists(path)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const Json json, ReadJsonFile(path));
  FieldReader read(json, path);
  const int64_t length = read.Int("max_seq_length", 1, 1 << 20, model.config.max_positions);
  RETURN_IF_ERROR(read.status());
  if (length < model.config.max_positions) {
    model.config.max_positions = length;
    Tensor& positions = model.tensors.at("embed_positions");
    positions = positions.Slice(0, 0, length);
  }
  return absl::OkStatus();
}

// A sentence-transformers model's modules.json: the pooling module's mode and whether a
// Normalize module follows. Without modules.json: mean pooling, not normalized.
absl::Status ReadSentenceTransformers(const std::string& directory, ModelConfig& config) {
  const std::string modules_path = directory + "/modules.json";
  if (!std::filesystem::exists(modules_path)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const Json modules, ReadJsonFile(modules_path));
  if (!modules.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(modules_path, ": not a list of modules"));
  }
  for (const Json& module : modules) {
    if (!module.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(modules_path, ": a module is not an object"));
    }
    const std::string type = StringField(module, "type");
    const std::string path = StringField(module, "path");
    if (type == "sentence_transformers.models.Transformer") continue;
    if (type == "sentence_transformers.models.Normalize") {
      config.normalize = true;
      continue;
    }
    if (type != "sentence_transformers.models.Pooling" || path.empty() ||
        path.find("..") != std::string::npos || path.front() == '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(modules_path, ": module ", module.dump(),
                       " is not supported (Transformer, Pooling and Normalize are)"));
    }
    const std::string pooling_path = absl::StrCat(directory, "/", path, "/config.json");
    ASSIGN_OR_RETURN(const Json pooling, ReadJsonFile(pooling_path));
    if (!pooling.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(pooling_path, ": not a JSON object"));
    }
    std::vector<std::pair<std::string, Pooling>> modes = {
        {"pooling_mode_mean_tokens", Pooling::kMean},
        {"pooling_mode_cls_token", Pooling::kFirst},
        {"pooling_mode_lasttoken", Pooling::kLast}};
    int chosen = 0;
    for (const auto& [field, mode] : modes) {
      if (BoolField(pooling, field)) {
        config.pooling = mode;
        ++chosen;
      }
    }
    for (const char* field : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                              "pooling_mode_weightedmean_tokens"}) {
      if (BoolField(pooling, field)) {
        return absl::InvalidArgumentError(absl::StrCat(
            pooling_path, ": field ", field, " is not supported (mean, cls and last token are)"));
      }
    }
    if (chosen != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(pooling_path,
                       ": exactly one of pooling_mode_mean_tokens, pooling_mode_cls_token and "
                       "pooling_mode_lasttoken must be true"));
    }
  }
  return absl::OkStatus();
}

// config_sentence_transformers.json's prompts, by name, and the default one.
absl::Status ReadPrompts(const std::string& directory, ModelConfig& config) {
  const std::string path = directory + "/config_sentence_transformers.json";
  if (!std::filesystem::exists(path)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const Json settings, ReadJsonFile(path));
  if (!settings.is_object()) return absl::InvalidArgumentError(path + ": not a JSON object");
  if (const auto prompts = settings.find("prompts");
      prompts != settings.end() && !prompts->is_null()) {
    if (!prompts->is_object()) {
      return absl::InvalidArgumentError(path + ": field prompts is not an object");
    }
    for (const auto& [name, text] : prompts->items()) {
      if (!text.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": field prompts.", name, " is not a string"));
      }
      config.prompts[name] = text.get<std::string>();
    }
  }
  config.default_prompt_name = StringField(settings, "default_prompt_name");
  if (!config.default_prompt_name.empty() && !config.prompts.contains(config.default_prompt_name)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": default_prompt_name \"",
                                                   config.default_prompt_name,
                                                   "\" is not one of its prompts"));
  }
  return absl::OkStatus();
}

// The activation a classifier's scores take: the one a sentence-transformers CrossEncoder names
// (v3's sbert_ce_default_activation_function, v4's sentence_transformers.activation_fn), else as
// transformers' text-classification pipeline and text-embeddings-inference apply them: a sigmoid
// for one label or multi-label classification, a softmax over several.
absl::Status ReadScoreActivation(const Json& config, const std::string& config_path,
                                 ClassifierConfig& classifier) {
  using ScoreActivation = ClassifierConfig::ScoreActivation;
  std::string field = "sbert_ce_default_activation_function";
  const Json* named = nullptr;
  if (auto it = config.find(field); it != config.end() && it->is_string()) named = &*it;
  if (auto it = config.find("sentence_transformers"); it != config.end() && it->is_object()) {
    if (auto fn = it->find("activation_fn"); fn != it->end() && fn->is_string()) {
      named = &*fn;
      field = "sentence_transformers.activation_fn";
    }
  }
  if (named != nullptr) {
    const std::string name = named->get<std::string>();
    static const auto* const kKnown = new std::map<std::string, ScoreActivation>{
        {"torch.nn.modules.activation.Sigmoid", ScoreActivation::kSigmoid},
        {"torch.nn.modules.linear.Identity", ScoreActivation::kNone},
        {"torch.nn.modules.activation.Softmax", ScoreActivation::kSoftmax}};
    const auto known = kKnown->find(name);
    if (known == kKnown->end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": field ", field, ": \"", name.substr(0, 128),
                       "\" is not supported (Sigmoid, Identity and Softmax are)"));
    }
    classifier.score_activation = known->second;
    return absl::OkStatus();
  }
  const auto problem = config.find("problem_type");
  const bool multi_label = problem != config.end() && *problem == "multi_label_classification";
  classifier.score_activation = multi_label || classifier.num_labels == 1
                                    ? ScoreActivation::kSigmoid
                                    : ScoreActivation::kSoftmax;
  return absl::OkStatus();
}

// A *ForSequenceClassification checkpoint (config.json's architectures): its number of labels
// (num_labels, or id2label's size) and their names, id2label's values in the order of their ids.
absl::Status ReadSequenceClassifier(const Json& config, const std::string& config_path,
                                    ClassifierConfig& classifier) {
  const auto architectures = config.find("architectures");
  if (architectures == config.end() || !architectures->is_array() || architectures->empty() ||
      !(*architectures)[0].is_string() ||
      !absl::EndsWith((*architectures)[0].get<std::string>(), "ForSequenceClassification")) {
    return absl::OkStatus();
  }
  const auto id2label = config.find("id2label");
  if (id2label != config.end() && id2label->is_object()) {
    std::map<int64_t, std::string> names;
    for (const auto& [id, name] : id2label->items()) {
      int64_t index = 0;
      if (!absl::SimpleAtoi(id, &index) || index < 0 || index >= (1 << 20) || !name.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(config_path, ": field id2label: \"", id,
                                                       "\" is not a label id with a name"));
      }
      names[index] = name.get<std::string>();
    }
    for (const auto& [index, name] : names) {
      if (index != static_cast<int64_t>(classifier.labels.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat(config_path, ": field id2label: the ids are not 0 to ", names.size() - 1));
      }
      classifier.labels.push_back(name);
    }
  }
  // transformers leaves its default, two labels LABEL_0 and LABEL_1, out of config.json.
  FieldReader read(config, config_path);
  classifier.num_labels =
      read.Int("num_labels", 1, 1 << 20,
               classifier.labels.empty() ? 2 : static_cast<int64_t>(classifier.labels.size()));
  RETURN_IF_ERROR(read.status());
  if (classifier.labels.empty()) {
    for (int64_t i = 0; i < classifier.num_labels; ++i) {
      classifier.labels.push_back(absl::StrCat("LABEL_", i));
    }
  }
  if (static_cast<int64_t>(classifier.labels.size()) != classifier.num_labels) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": field num_labels is ",
                                                   classifier.num_labels, " but id2label has ",
                                                   classifier.labels.size(), " labels"));
  }
  return ReadScoreActivation(config, config_path, classifier);
}

}  // namespace

absl::StatusOr<Json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  Json json = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  return json;
}

Activation ActivationOf(FieldReader& read, const std::string& field, const std::string& fallback) {
  return read.Choice<Activation>(field,
                                 {{"gelu", Activation::kGeluErf},
                                  {"gelu_new", Activation::kGeluTanh},
                                  {"gelu_pytorch_tanh", Activation::kGeluTanh},
                                  {"relu", Activation::kRelu},
                                  {"silu", Activation::kSilu}},
                                 fallback);
}

bool IsHuggingFaceConfig(const Json& config) {
  return config.is_object() && config.contains("model_type");
}

absl::StatusOr<int64_t> HeadDim(FieldReader& read, int64_t dim, int64_t heads,
                                const std::string& heads_field) {
  if (dim % heads != 0) {
    read.Fail(heads_field, absl::StrCat("is ", heads, ", which does not divide ", dim));
    return read.status();
  }
  return dim / heads;
}

absl::StatusOr<ImportedModel> ImportHuggingFace(const std::string& directory, const Json& config) {
  const std::string config_path = directory + "/config.json";
  FieldReader read(config, config_path);
  const std::string model_type = read.String("model_type", "");
  const bool bert_family = model_type == "bert" || model_type == "roberta" ||
                           model_type == "xlm-roberta" || model_type == "distilbert";
  const bool llama_family =
      model_type == "llama" || model_type == "mistral" || model_type == "qwen2";
  if (!bert_family && !llama_family && model_type != "gpt2") {
    return absl::InvalidArgumentError(absl::StrCat(
        config_path, ": model_type \"", model_type,
        "\" is not supported; supported: bert, roberta, xlm-roberta, distilbert, gpt2, llama, "
        "mistral, qwen2"));
  }
  ASSIGN_OR_RETURN(HfTensors tensors, HfTensors::Open(directory));
  ImportedModel model;
  RETURN_IF_ERROR(ReadSequenceClassifier(config, config_path, model.config.classifier));
  if (model.config.classifier.num_labels > 0 && !bert_family && !llama_family) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_path, ": a sequence classifier of model_type \"", model_type,
        "\" is not supported (bert, roberta, xlm-roberta, distilbert, llama, mistral and qwen2 "
        "are)"));
  }
  RETURN_IF_ERROR(bert_family    ? ImportBertFamily(model_type, read, tensors, model)
                  : llama_family ? ImportLlamaFamily(model_type, read, tensors, model)
                                 : ImportGpt2(read, tensors, model));
  if (bert_family) {
    RETURN_IF_ERROR(ReadSentenceTransformers(directory, model.config));
    RETURN_IF_ERROR(ReadPrompts(directory, model.config));
    RETURN_IF_ERROR(ReadMaxSequenceLength(directory, model));
  }
  if (!std::filesystem::exists(directory + "/tokenizer.json")) {
    return absl::NotFoundError(
        absl::StrCat(directory, ": tokenizer.json is missing (the model takes token ids)"));
  }
  // eos_token_id: one id or a list of them, each of which ends generation.
  if (const auto eos = config.find("eos_token_id"); eos != config.end() && !eos->is_null()) {
    const Json ids = eos->is_array() ? *eos : Json::array({*eos});
    for (const Json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() >= model.config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(config_path, ": field eos_token_id is ",
                                                       eos->dump(), ", not token ids below ",
                                                       model.config.vocab_size));
      }
      model.config.tokenizer.end_of_text_ids.push_back(id.get<int64_t>());
    }
  }
  model.config.tokenizer.type = "huggingface";
  model.config.tokenizer.file = "tokenizer.json";
  model.weights_path = tensors.first_path();
  model.weight_file = tensors.first_file_bytes();
  return model;
}

}  // namespace attnserve
