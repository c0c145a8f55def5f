// The Tokenize and Detokenize RPCs, and the text limit every RPC that takes text applies. They
// run on the gRPC thread that received the request, never on a model's scheduler: tokenizing is
// per request and needs no batch (docs/serving.md gives its cost).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/attnserve/v1/inference.pb.h"
#include "server/model_worker.h"

namespace attnserve::server {

// The ids of `text` (field `field` of the request), refused with INVALID_ARGUMENT naming the
// field when it is longer than --max_text_bytes or the tokenizer cannot encode it.
absl::StatusOr<std::vector<int64_t>> EncodeText(const std::string& text, const std::string& field,
                                                const ModelWorker& worker);

absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request,
                                              const ModelWorker& worker);
absl::StatusOr<v1::DetokenizeResponse> Detokenize(const v1::DetokenizeRequest& request,
                                                  const ModelWorker& worker);

}  // namespace attnserve::server
