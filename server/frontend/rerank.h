// Rerank: documents ordered by their relevance to a query. Not a method of the core: each
// (query, document) pair is a Classify input of a cross-encoder (a head with one score), and the
// ranking is made from their scores, the same for every protocol that reranks (attnserve.v1's
// Rerank, text-embeddings-inference's /rerank, Cohere's and Jina's /v1/rerank, vLLM's /v1/score).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/core/engine_loop.h"
#include "server/core/task.h"
#include "server/frontend/method_inputs.h"

namespace attnserve::server {

struct RerankInput {
  std::string query;
  std::vector<std::string> documents;
  bool raw_scores = false;
  // Over-long pairs lose tokens from their document (only_second), never from the query.
  bool truncate = false;
  bool truncate_from_left = false;
  // The answer repeats the documents' texts: their bytes count in its bound, this many times
  // over (the protocol's escaping of them).
  int64_t echo_scale = 0;
};

// The query and documents as Classify's pairs, checked as Classify checks them (errors name the
// protocol's query and documents fields), for a model with one score.
absl::Status ValidateRerank(const RerankInput& input, const FieldNames& names,
                            const EngineLoop& worker, Task& task);

struct RankedDocument {
  int64_t index = 0;  // in the request's documents
  float score = 0.0f;
};

// The documents by descending score (ties in the request's order), the first `top_n` of them
// (all when top_n is 0 or more than there are).
std::vector<RankedDocument> Rank(const std::vector<std::vector<float>>& scores, int64_t top_n);

}  // namespace attnserve::server
