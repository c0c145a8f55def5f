// The Open Inference Protocol's REST binding (KServe v2's HTTP/REST API, docs/open-inference.md)
// on the HTTP port, as Triton's tritonclient.http and KServe's clients call it: /v2,
// /v2/health/live and /ready, /v2/models/{name}[/versions/{v}] with /ready, and .../infer with
// JSON tensors or the binary tensor data extension. A codec only: each request becomes the
// ModelInferRequest the gRPC binding takes (server/open_inference/infer_call.h), and its
// ModelInferResponse goes back as JSON, so both bindings answer alike.
#pragma once

#include <memory>

#include "server/frontend/admission.h"
#include "server/http/http_apis.h"

namespace attnserve::server {

class OpenInferenceRest final : public HttpApi {
 public:
  explicit OpenInferenceRest(const Admission& admission) : admission_(admission) {}
  Match Matches(const HttpRequest& request) const override;
  // Liveness and readiness are open to all, as probes are.
  bool IsProbe(const HttpRequest& request) const override;
  void Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) override;

 private:
  void ModelMetadata(const std::string& name, const std::string& version,
                     HttpResponder& responder) const;
  void Infer(const HttpRequest& request, const std::string& name, const std::string& version,
             std::shared_ptr<HttpResponder> responder) const;

  const Admission& admission_;
};

}  // namespace attnserve::server
