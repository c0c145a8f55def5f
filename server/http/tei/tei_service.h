// Hugging Face text-embeddings-inference's HTTP API (docs/tei.md): /embed, /rerank, /predict,
// /tokenize and /info, as TEI's clients (its Python client, LangChain's and LlamaIndex's TEI
// integrations, Haystack's) call them. TEI serves one model, so its requests name none: each
// goes to the model a `model` field names, else to the one model that answers its method. One
// more edge of the core: every call takes the admission, validation, budgets, queue and metrics
// of the other APIs.
#pragma once

#include <memory>

#include "server/frontend/admission.h"
#include "server/http/http_apis.h"

namespace attnserve::server {

class TeiService final : public HttpApi {
 public:
  explicit TeiService(const Admission& admission) : admission_(admission) {}
  // POST /embed, /rerank, /predict, /tokenize (with TEI's "inputs": vLLM's has a "prompt"),
  // GET /info.
  Match Matches(const HttpRequest& request) const override;
  void Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) override;

 private:
  void Embed(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) const;
  void Rerank(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) const;
  void Predict(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) const;
  void Tokenize(const HttpRequest& request, HttpResponder& responder) const;
  void Info(HttpResponder& responder) const;

  const Admission& admission_;
};

}  // namespace attnserve::server
