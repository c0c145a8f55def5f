// The HTTP port's front: its health check (open to all), the API key check, then the API whose
// request it is (OpenAI's and vLLM's, text-embeddings-inference's), each an edge of the same
// core through the same admission.
#pragma once

#include <memory>
#include <vector>

#include "server/frontend/admission.h"
#include "server/http/http_server.h"

namespace attnserve::server {

// One API the HTTP port speaks.
class HttpApi {
 public:
  // kWrongMethod: the path is this API's, the method is not (405 unless another API takes it).
  enum class Match { kNo, kWrongMethod, kYes };

  virtual ~HttpApi() = default;
  virtual Match Matches(const HttpRequest& request) const = 0;
  // A health probe, answered without an API key.
  virtual bool IsProbe(const HttpRequest& /*request*/) const { return false; }
  // A request it matched, from a caller already let in; `request.client` names who asked.
  virtual void Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) = 0;
};

class HttpApis final : public HttpHandler {
 public:
  // The first of `apis` that matches a request answers it.
  HttpApis(const Admission& admission, std::vector<HttpApi*> apis)
      : admission_(admission), apis_(std::move(apis)) {}
  void Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) override;

 private:
  const Admission& admission_;
  const std::vector<HttpApi*> apis_;
};

}  // namespace attnserve::server
