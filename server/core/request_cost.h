// What a validated request costs, known before it is admitted: the tokens it puts through the
// engine, the activation memory of its engine call, the size of its answer, and for a
// generation the KV cache blocks its whole context needs (docs/serving.md).
#pragma once

#include <cstdint>

#include "engine/architectures/activation_memory.h"
#include "engine/architectures/model.h"
#include "server/core/task.h"

namespace attnserve::server {

struct RequestCost {
  // Unary requests: the engine call that answers them (sequences padded to the longest), as
  // the scheduler batches it with others. Generate: the prompt, fed in chunks.
  EngineCall call;
  // The engine passes that call makes alone: 1, or Embed's groups of similar length.
  int64_t passes = 1;
  // Unary requests: the tokens the engine computes, padding included (call.batch × call.time
  // in one pass); the prompt for Generate.
  int64_t tokens = 0;
  int64_t activation_bytes = 0;  // the largest pass's
  int64_t response_bytes = 0;
  int64_t context_tokens = 0;  // Generate: prompt + max_tokens, what its cache may hold
};

RequestCost CostOf(const Task& task, const Model& model);

}  // namespace attnserve::server
