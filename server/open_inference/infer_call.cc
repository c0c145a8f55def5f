#include "server/open_inference/infer_call.h"

#include "absl/strings/str_cat.h"

namespace attnserve::server {

absl::Status CheckModelVersion(const std::string& name, const std::string& version) {
  if (version.empty() || version == kModelVersion) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("model ", name.substr(0, 128), " has version ",
                                          kModelVersion, " only, not \"", version.substr(0, 32),
                                          "\""));
}

InferStart PrepareModelInfer(const Admission& admission, absl::Status decoded,
                             const inference::ModelInferRequest& request) {
  InferStart start;
  start.prepared = std::move(decoded);
  absl::StatusOr<InferCall> call = absl::UnknownError("not translated");
  if (start.prepared.ok()) {
    auto model = FindInferModel(admission.repository(), request.model_name());
    if (model.ok()) start.label = model->worker->name();
    start.prepared = model.ok() ? CheckModelVersion(request.model_name(), request.model_version())
                                : model.status();
    if (start.prepared.ok()) {
      call = TranslateInferRequest(*model, request);
      start.prepared = call.status();
    }
  }
  // What answering needs, kept by the call; the request itself goes once validated.
  start.answer =
      std::make_shared<InferAnswer>(start.prepared.ok() ? std::move(call->answer) : InferAnswer());
  if (start.prepared.ok()) start.call = *std::move(call);
  return start;
}

}  // namespace attnserve::server
