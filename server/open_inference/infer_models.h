// attnserve's methods as Open Inference Protocol (KServe v2) models: which name reaches which
// method, and the tensors each takes and returns (docs/open-inference.md).
//
// A model answers its first method under its own name (NextToken for language models, Embed for
// encoders and feature-set models) and each method under "<model>/<method>": demo/score,
// demo/generate (answered in one message: the protocol has no streaming), demo/tokenize,
// reranker/classify (a classification head's scores, of texts or of pairs with text_pair). A model
// directory's name cannot hold a "/", so the two never collide.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/inference/grpc_predict_v2.pb.h"
#include "server/frontend/model_repository.h"

namespace attnserve::server {

enum class InferMethod { kNextToken, kEmbed, kScore, kGenerate, kClassify, kTokenize, kDetokenize };

struct InferModel {
  EngineLoop* worker = nullptr;
  InferMethod method = InferMethod::kNextToken;
};

// NOT_FOUND, naming the model or method, for a name that reaches no method.
absl::StatusOr<InferModel> FindInferModel(const ModelRepository& repository,
                                          const std::string& name);
// Every name FindInferModel accepts for `worker`.
std::vector<std::string> InferModelNames(const EngineLoop& worker);
// The attnserve.v1 method behind it: "NextToken", "Embed", "Score", "Generate", "Classify",
// "Tokenize" or "Detokenize".
const char* MethodName(InferMethod method);
// The one version each model has.
inline constexpr char kModelVersion[] = "1";

// A tensor a method takes or returns: its name, datatype and shape (-1: any size).
struct TensorSpec {
  std::string name;
  const char* datatype;
  std::vector<int64_t> shape;
};

struct Signature {
  std::vector<TensorSpec> inputs, outputs;
};

// What `model`'s method takes and returns.
Signature SignatureOf(const InferModel& model);
std::vector<std::string> TensorNames(const std::vector<TensorSpec>& specs);
// Embed's pooled vectors per input, and their width (per-token states have one per token).
std::pair<int64_t, int64_t> EmbeddingShape(const ModelConfig& config);

// Its inputs and outputs with datatypes and shapes, for ModelMetadata.
void DescribeInferModel(const InferModel& model, inference::ModelMetadataResponse& metadata);

}  // namespace attnserve::server
