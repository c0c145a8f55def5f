// The Open Inference Protocol's ModelInfer, whichever binding carried it (gRPC's
// inference.GRPCInferenceService, or the REST binding on the HTTP port): the request's model
// found, its tensors translated and validated in the protocol's words, and its task queued
// through the admission every protocol takes. A binding decodes the request, makes the call
// that answers it and encodes the response.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/inference/grpc_predict_v2.pb.h"
#include "server/frontend/admission.h"
#include "server/open_inference/infer_requests.h"

namespace attnserve::server {

// A decoded ModelInferRequest, translated: `prepared` says whether it can be queued (its model
// exists at the version asked for, and its tensors make an input), `answer` is what answering
// it takes, and `label` the model for the metrics ("_unknown" when not served).
struct InferStart {
  absl::Status prepared;
  std::shared_ptr<InferAnswer> answer;
  InferCall call;
  std::string label = "_unknown";
};

// NOT_FOUND for a version other than the one every model has.
absl::Status CheckModelVersion(const std::string& name, const std::string& version);

// `decoded`: whether the binding could read the request at all.
InferStart PrepareModelInfer(const Admission& admission, absl::Status decoded,
                             const inference::ModelInferRequest& request);

// Queues the task through `admission`, answered by `call` (a TaskSink the admission takes,
// whose answer is InferResponse(*start.answer, task)); Tokenize and Detokenize, which need no
// task, are answered at once through `answer_now`. `answer_scale`: how many times the protobuf
// message's size the binding's encoding of the answer may take (Task::answer_scale).
template <typename Call>
void StartModelInfer(
    const Admission& admission, const absl::StatusOr<CallOrigin>& origin, InferStart& start,
    Call* call, int64_t answer_scale,
    const std::function<void(absl::StatusOr<inference::ModelInferResponse>)>& answer_now);

}  // namespace attnserve::server

#include "server/open_inference/infer_call_inl.h"
