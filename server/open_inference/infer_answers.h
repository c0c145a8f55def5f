// A ModelInferResponse made from the core's results (server/core/results.h): the output tensors
// the request asked for.
#pragma once

#include <string>
#include <vector>

#include "proto/inference/grpc_predict_v2.pb.h"
#include "server/core/results.h"
#include "server/core/task.h"
#include "server/open_inference/infer_requests.h"

namespace attnserve::server {

// The answer from the task's results, which it takes apart.
inference::ModelInferResponse InferResponse(const InferAnswer& answer, Task& task);
// Tokenize's and Detokenize's, which are answered at once, without a task.
inference::ModelInferResponse InferResponse(const InferAnswer& answer,
                                            const std::vector<TokenSpan>& tokens);
inference::ModelInferResponse InferResponse(const InferAnswer& answer, const std::string& text);

}  // namespace attnserve::server
