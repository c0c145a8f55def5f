// The Tokenize and Detokenize RPCs, and the text limit every RPC that takes text applies. They
// run on the gRPC thread that received the request, never on a model's scheduler: tokenizing is
// per request and needs no batch (docs/serving.md gives its cost).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/engine_loop.h"
#include "server/core/results.h"
#include "server/frontend/method_inputs.h"

namespace attnserve::server {

// The ids of `text` (field `path` of the request), refused with INVALID_ARGUMENT naming the
// field when it is longer than --max_text_bytes or the tokenizer cannot encode it.
absl::StatusOr<std::vector<int64_t>> EncodeText(const std::string& text, const FieldPath& path,
                                                const FieldNames& names, const EngineLoop& worker,
                                                bool add_special_tokens = true);

// A text, or a pair of texts (`pair` not null), encoded with the tokenizer's special tokens (a
// pair as its template joins them, with type ids), cut to the model's context when `truncation`
// is enabled (else uncut: the caller refuses what does not fit). Errors name the field: `path`,
// its kPairText part for the second text of a pair.
absl::StatusOr<Encoding> EncodeInput(const std::string& text, const std::string* pair,
                                     const TextTruncation& truncation, const FieldPath& path,
                                     const FieldNames& names, const EngineLoop& worker);

// Refused, naming the limit, when the answer could pass the message limit.
absl::StatusOr<std::vector<TokenSpan>> Tokenize(const TokenizeInput& input, const FieldNames& names,
                                                const EngineLoop& worker);
absl::StatusOr<std::string> Detokenize(const DetokenizeInput& input, const FieldNames& names,
                                       const EngineLoop& worker);

}  // namespace attnserve::server
