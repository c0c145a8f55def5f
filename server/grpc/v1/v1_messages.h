// attnserve.v1's edge: its request messages read into the methods' inputs
// (server/frontend/method_inputs.h), its words for their fields in errors, and its response
// messages built from the core's results (server/core/results.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/attnserve/v1/inference.pb.h"
#include "server/core/results.h"
#include "server/core/task.h"
#include "server/frontend/method_inputs.h"
#include "server/frontend/rerank.h"

namespace attnserve::server {

// "sequences[2].tokens.ids[5]", "feature_sets[0].width", "prompt.text", "top_k".
class V1FieldNames final : public FieldNames {
 public:
  std::string Name(const FieldPath& path) const override;
};

// Each request's input; only an Embed can be refused here, for a pooling the protocol does not
// define (INVALID_ARGUMENT).
absl::StatusOr<NextTokenInput> ReadInput(const v1::NextTokenRequest& request);
absl::StatusOr<ScoreInput> ReadInput(const v1::ScoreRequest& request);
absl::StatusOr<EmbedInput> ReadInput(const v1::EmbedRequest& request);
absl::StatusOr<GenerateInput> ReadInput(const v1::GenerateRequest& request);
absl::StatusOr<ClassifyInput> ReadInput(const v1::ClassifyRequest& request);
absl::StatusOr<RerankInput> ReadInput(const v1::RerankRequest& request);
absl::StatusOr<TokenizeInput> ReadInput(const v1::TokenizeRequest& request);
absl::StatusOr<DetokenizeInput> ReadInput(const v1::DetokenizeRequest& request);

// The results are taken apart as the messages are built.
v1::NextTokenResponse NextTokenMessage(std::vector<NextTokenRow>& rows);
v1::ScoreResponse ScoreMessage(ScoreResult& result);
v1::EmbedResponse EmbedMessage(std::vector<Embedding>& embeddings);
v1::GenerateResponse GenerateMessage(const GenerationEvent& event);
v1::ClassifyResponse ClassifyMessage(const ClassifyJob& job);
// The ranking of the request's documents, each with its text when the request asks.
v1::RerankResponse RerankMessage(const ClassifyJob& job, const v1::RerankRequest& request);
v1::TokenizeResponse TokenizeMessage(std::vector<TokenSpan>& tokens);

}  // namespace attnserve::server
