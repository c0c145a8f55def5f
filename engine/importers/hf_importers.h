// One importer per family of Hugging Face model_types (hf_checkpoint.h): each reads its fields of
// config.json into the engine's config and its tensors under the engine's names.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "engine/importers/field_reader.h"
#include "engine/importers/hf_checkpoint.h"
#include "engine/importers/hf_tensors.h"

namespace attnserve {

// bert, roberta, xlm-roberta, distilbert: post-norm encoders with a LayerNorm over the
// embeddings; with model.config.classifier.num_labels set, the sequence classification head too.
absl::Status ImportBertFamily(const std::string& model_type, FieldReader& read, HfTensors& tensors,
                              ImportedModel& model);

// gpt2: a pre-norm causal LM with Conv1D weights ([in, out]) and a fused c_attn.
absl::Status ImportGpt2(FieldReader& read, HfTensors& tensors, ImportedModel& model);

// llama, mistral, qwen2: pre-norm causal LMs with RMSNorm, rotary positions, grouped-query
// attention and SwiGLU.
absl::Status ImportLlamaFamily(const std::string& model_type, FieldReader& read, HfTensors& tensors,
                               ImportedModel& model);

// A JSON file of the snapshot (config.json, modules.json, the shard index, ...).
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

// transformers' activation names: gelu (erf), gelu_new and gelu_pytorch_tanh (tanh), relu, silu.
Activation ActivationOf(FieldReader& read, const std::string& field, const std::string& fallback);

// The head size, if `heads` divides `dim`; an error naming `heads_field` otherwise.
absl::StatusOr<int64_t> HeadDim(FieldReader& read, int64_t dim, int64_t heads,
                                const std::string& heads_field);

}  // namespace attnserve
