// attnserve's methods as Open Inference Protocol (KServe v2) models: which name reaches which
// method, the tensors each takes and returns (docs/open-inference.md), a ModelInferRequest's
// tensors read into the method's input (server/frontend/method_inputs.h) that the same validation
// and queue take as attnserve.v1's, its words for the fields in errors, and the core's results
// (server/core/results.h) as output tensors.
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
#include "proto/inference/grpc_predict_v2.pb.h"
#include "server/core/results.h"
#include "server/core/task.h"
#include "server/frontend/method_inputs.h"
#include "server/frontend/model_repository.h"
#include "server/grpc/open_inference/infer_tensors.h"

namespace attnserve::server {

enum class InferMethod { kNextToken, kEmbed, kScore, kGenerate, kTokenize, kDetokenize };

struct InferModel {
  EngineLoop* worker = nullptr;
  InferMethod method = InferMethod::kNextToken;
};

// NOT_FOUND, naming the model or method, for a name that reaches no method.
absl::StatusOr<InferModel> FindInferModel(const ModelRepository& repository,
                                          const std::string& name);
// Every name FindInferModel accepts for `worker`.
std::vector<std::string> InferModelNames(const EngineLoop& worker);
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

// The tensors and parameters of a request name its fields: "input 'text' row 2",
// "input 'input_ids' [0, 4]", "parameter 'top_k'".
class InferFieldNames final : public FieldNames {
 public:
  explicit InferFieldNames(const InferAnswer& answer) : answer_(answer) {}
  std::string Name(const FieldPath& path) const override;

 private:
  const InferAnswer& answer_;
};

// A ModelInferRequest as the input of its method (the one model.method names), and what
// answering it takes.
struct InferCall {
  InferAnswer answer;
  NextTokenInput next_token;
  EmbedInput embed;
  ScoreInput score;
  GenerateInput generate;
  TokenizeInput tokenize;
  DetokenizeInput detokenize;
};
// INVALID_ARGUMENT naming the tensor or parameter for inputs that do not make a request.
absl::StatusOr<InferCall> TranslateInferRequest(const InferModel& model,
                                                const inference::ModelInferRequest& request);

// The answer from the task's results, which it takes apart.
inference::ModelInferResponse InferResponse(const InferAnswer& answer, Task& task);
// Tokenize's and Detokenize's, which are answered at once, without a task.
inference::ModelInferResponse InferResponse(const InferAnswer& answer,
                                            const std::vector<TokenSpan>& tokens);
inference::ModelInferResponse InferResponse(const InferAnswer& answer, const std::string& text);

}  // namespace attnserve::server
