// Hugging Face checkpoints served as they are: a snapshot directory (config.json with its
// `model_type`, model.safetensors or the shards its index names, tokenizer.json, and for a
// sentence-transformers model modules.json and the pooling module's config) read into the
// engine's config and tensor names, so that the model loads as if the exporter had written it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "engine/importers/model_config.h"
#include "engine/safetensors.h"

namespace attnserve {

struct ImportedModel {
  ModelConfig config;
  std::map<std::string, Tensor> tensors;  // under the engine's names (docs/model-format.md)
  std::string weights_path;               // the (first) safetensors file, for errors
  FileBytes weight_file;                  // its bytes
};

// Whether config.json is a Hugging Face one (it names a model_type).
bool IsHuggingFaceConfig(const nlohmann::json& config);

// The model_types served: bert, roberta, distilbert, gpt2. Errors name the file and the field
// or tensor; an unsupported model_type lists the supported ones.
absl::StatusOr<ImportedModel> ImportHuggingFace(const std::string& directory,
                                                const nlohmann::json& config);

}  // namespace attnserve
