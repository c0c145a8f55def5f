#include "server/frontend/admission.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::server {

std::string Admission::ModelLabel(const std::string& model) const {
  return repository_.Find(model) != nullptr ? model : "_unknown";
}

absl::StatusOr<EngineLoop*> Admission::Route(const std::string& model,
                                             const std::string& method) const {
  if (model.empty()) return absl::InvalidArgumentError("model is empty");
  EngineLoop* worker = repository_.Find(model);
  if (worker == nullptr) {
    return absl::NotFoundError(absl::StrCat("no model named \"", model.substr(0, 128),
                                            "\"; ListModels shows what is served"));
  }
  const std::vector<std::string> methods = SupportedMethods(worker->model());
  if (std::find(methods.begin(), methods.end(), method) == methods.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", model, " (", worker->model().config.architecture, ") does not answer ", method,
        "; it answers ", methods.empty() ? "nothing yet" : absl::StrJoin(methods, ", ")));
  }
  return worker;
}

}  // namespace attnserve::server
