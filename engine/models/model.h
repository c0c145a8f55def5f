// Loading a model directory: config.json plus model.safetensors (docs/model-format.md).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/models/causal_lm.h"
#include "engine/models/encoder.h"
#include "engine/tokenizer/byte_tokenizer.h"

namespace attnserve {

// A loaded model: exactly one architecture pointer is set.
struct Model {
  std::string directory;
  ModelConfig config;
  std::unique_ptr<CausalLM> causal_lm;
  std::unique_ptr<Encoder> encoder;
  std::optional<ByteTokenizer> tokenizer;  // models with token inputs
};

// Reads and validates the directory: every field of config.json, every tensor's presence,
// dtype and shape, and no tensor left unused. Errors name the file and the field or tensor.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& directory);

}  // namespace attnserve
