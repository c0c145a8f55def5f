// The OpenAI-compatible HTTP API (docs/openai.md): /v1/models, /v1/completions,
// /v1/chat/completions (through the model's chat template), /v1/embeddings; the rerank API of
// Cohere, Jina and vLLM (/v1/rerank, /v2/rerank) and vLLM's /v1/score, /tokenize and
// /detokenize. One more edge of the server's core: each call takes the
// admission, validation, budgets, queue and metrics of the gRPC APIs (server/frontend/admission.h),
// and its answers are built here from the core's protocol-neutral results.
#pragma once

#include <memory>

#include "absl/time/clock.h"
#include "server/frontend/admission.h"
#include "server/http/http_apis.h"

namespace attnserve::server {

class OpenAiService final : public HttpApi {
 public:
  explicit OpenAiService(const Admission& admission) : admission_(admission) {}
  Match Matches(const HttpRequest& request) const override;
  void Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) override;

 private:
  void Models(HttpResponder& responder) const;
  void Completions(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) const;
  void Chat(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) const;
  void Embeddings(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) const;
  // Cohere's, Jina's and vLLM's rerank, and vLLM's score of text pairs.
  void Rerank(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) const;
  void Score(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) const;
  void Tokenize(const HttpRequest& request, HttpResponder& responder) const;
  void Detokenize(const HttpRequest& request, HttpResponder& responder) const;

  const Admission& admission_;
  const absl::Time started_ = absl::Now();  // the models' "created"
};

}  // namespace attnserve::server
