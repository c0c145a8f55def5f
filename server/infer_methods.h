// attnserve's methods as Open Inference Protocol (KServe v2) models: which name reaches which
// method, the tensors each takes and returns (docs/open-inference.md), and the translation of a
// ModelInferRequest into the attnserve.v1 request that the same validation and queue take, and
// of the attnserve.v1 answer back into output tensors.
//
// A model answers its first method under its own name (NextToken for language models, Embed for
// encoders and feature-set models) and each method under "<model>/<method>": demo/score,
// demo/generate (answered in one message: the protocol has no streaming), demo/tokenize. A model
// directory's name cannot hold a "/", so the two never collide.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/attnserve/v1/inference.pb.h"
#include "proto/inference/grpc_predict_v2.pb.h"
#include "server/infer_tensors.h"
#include "server/model_repository.h"
#include "server/task.h"

namespace attnserve::server {

enum class InferMethod { kNextToken, kEmbed, kScore, kGenerate, kTokenize, kDetokenize };

struct InferModel {
  ModelWorker* worker = nullptr;
  InferMethod method = InferMethod::kNextToken;
};

// NOT_FOUND, naming the model or method, for a name that reaches no method.
absl::StatusOr<InferModel> FindInferModel(const ModelRepository& repository,
                                          const std::string& name);
// Every name FindInferModel accepts for `worker`.
std::vector<std::string> InferModelNames(const ModelWorker& worker);
// The attnserve.v1 method behind it: "NextToken", "Embed", "Score", "Generate", "Tokenize" or
// "Detokenize".
const char* MethodName(InferMethod method);
// The one version each model has.
inline constexpr char kModelVersion[] = "1";

// Its inputs and outputs with datatypes and shapes (-1: any size), for ModelMetadata.
void DescribeInferModel(const InferModel& model, inference::ModelMetadataResponse& metadata);

// What answering a ModelInferRequest takes once its task is done.
struct InferAnswer {
  InferModel model;
  InferOutputs outputs;
  std::string id;             // the request's, echoed
  std::string model_name;     // as the request named it
  bool token_states = false;  // Embed: per-token states rather than pooled vectors
  // The inputs the sequences and sources came from, for errors: "text", "input_ids", ...
  std::string sequence_input, source_input;
};

// A ModelInferRequest as the attnserve.v1 request of its method (the one of the three that
// model.method names), and what answering it takes.
struct InferCall {
  InferAnswer answer;
  v1::NextTokenRequest next_token;
  v1::EmbedRequest embed;
  v1::ScoreRequest score;
  v1::GenerateRequest generate;
  v1::TokenizeRequest tokenize;
  v1::DetokenizeRequest detokenize;
};
// INVALID_ARGUMENT naming the tensor or parameter for inputs that do not make a request.
absl::StatusOr<InferCall> TranslateInferRequest(const InferModel& model,
                                                const inference::ModelInferRequest& request);
// A validation error of the translated request, which speaks in attnserve.v1's terms
// (sequences[2], feature_sets[0]), put in the request's own (input 'text' row 2).
absl::Status InTensorTerms(const absl::Status& status, const InferAnswer& answer);

// The answer from the task's attnserve.v1 response.
inference::ModelInferResponse InferResponse(const InferAnswer& answer, const Task& task);
// Tokenize's and Detokenize's, which are answered at once, without a task.
inference::ModelInferResponse InferResponse(const InferAnswer& answer,
                                            const v1::TokenizeResponse& tokenized);
inference::ModelInferResponse InferResponse(const InferAnswer& answer,
                                            const v1::DetokenizeResponse& detokenized);

}  // namespace attnserve::server
