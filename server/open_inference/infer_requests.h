// A ModelInferRequest's tensors read into its method's input (server/frontend/method_inputs.h),
// which the same validation and queue take as attnserve.v1's, and the protocol's words for the
// fields in errors: "input 'text' row 2", "input 'input_ids' [0, 4]", "parameter 'top_k'".
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "proto/inference/grpc_predict_v2.pb.h"
#include "server/frontend/method_inputs.h"
#include "server/open_inference/infer_models.h"
#include "server/open_inference/infer_tensors.h"

namespace attnserve::server {

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
  ClassifyInput classify;
  TokenizeInput tokenize;
  DetokenizeInput detokenize;
};
// INVALID_ARGUMENT naming the tensor or parameter for inputs that do not make a request.
absl::StatusOr<InferCall> TranslateInferRequest(const InferModel& model,
                                                const inference::ModelInferRequest& request);

}  // namespace attnserve::server
