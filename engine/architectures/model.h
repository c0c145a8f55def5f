// Loading a model: a directory with config.json plus model.safetensors (docs/model-format.md), a
// Hugging Face snapshot, or a GGUF file (alone or as the one .gguf file of a directory).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/architectures/causal_lm.h"
#include "engine/architectures/encoder.h"
#include "engine/architectures/next_word.h"
#include "engine/architectures/perceiver_io.h"
#include "engine/architectures/seq2seq.h"
#include "engine/architectures/set_transformer.h"
#include "engine/safetensors.h"
#include "text/chat_template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace attnserve {

// A loaded model: what it computes (one of the architectures, behind the interface the server
// uses), its tokenizer and its weights' bytes.
struct Model {
  // The architecture itself (CausalLM, Encoder, ...), for tests and benchmarks; null if another.
  template <typename Architecture>
  const Architecture* As() const {
    return dynamic_cast<const Architecture*>(servable.get());
  }

  std::string directory;
  ModelConfig config;
  std::unique_ptr<ServableModel> servable;
  std::shared_ptr<const Tokenizer> tokenizer;  // models with token inputs
  std::vector<int64_t> end_of_text;            // the tokens that end generation, if any
  ChatTemplates chat_templates;                // its chat templates, if it has any
  int64_t max_token_text_bytes = 0;            // the longest Tokenizer::TokenText
  FileBytes weight_file;                       // model.safetensors as read, where the weights live
  std::string source;  // what was read, for the log: "model.gguf (210 Q4_1, 61 F32, 1 Q8_0)"
  // A block-quantized file under --weights=auto: which matrices the engine keeps exactly as the
  // file stores them, and which it quantized again with the difference that made (GridReport).
  std::string weights_as_stored;
  // The layers' matmul weights were copied into packed or int8 buffers and their pages in
  // weight_file released: the engine reads the rest (embeddings, norms) there.
  bool weights_packed = false;
};

struct LoadOptions {
  WeightFormat weights;  // float32 (the file's weights), int8 quantized at load, or automatic
};

// Reads and validates the directory: every field of config.json, every tensor's presence,
// dtype and shape, and no tensor left unused. Errors name the file and the field or tensor.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& directory,
                                                 const LoadOptions& options = {});

}  // namespace attnserve
