// GGUF files served as they are (llama.cpp's format): the metadata read into the engine's config,
// the tensors renamed to the engine's names and dequantized one at a time as the model takes
// them, the tokenizer and the chat templates built from the metadata.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_file.h"
#include "engine/importers/model_config.h"
#include "engine/importers/weight_reader.h"
#include "text/chat_template/chat_template.h"

namespace attnserve {

struct GgufImport {
  ModelConfig config;
  std::map<std::string, LazyTensor> tensors;  // under the engine's names
  std::string tokenizer_json;                 // for HfTokenizer::FromJson
  ChatTemplates chat_templates;
  // Whether the linear layers' weights are block-quantized in the file: 0 if not, else 4 or 8, the
  // engine's format closest to the file's size (LinearQuantizedBits in gguf_importer.cc); and what
  // the file holds, for the log: "210 Q4_1, 61 F32, ...".
  int quantized_bits = 0;
  std::string tensor_types;
};

// The .gguf file a model path stands for: the path itself if it names a .gguf file, else the one
// .gguf file in the directory when it has no config.json; empty if neither. An error when the
// directory holds several.
absl::StatusOr<std::string> GgufFileOf(const std::string& model_path);

// Architectures (general.architecture): llama (Llama, SmolLM, TinyLlama, Mistral) and qwen2.
// Errors name the file and the key or tensor.
absl::StatusOr<GgufImport> ImportGguf(const std::string& path);

}  // namespace attnserve
