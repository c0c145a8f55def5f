// What a request must fit before a model's engine loop admits it (docs/serving.md, "The resource
// model"): its tokens within --max_batch_tokens, its activations within one engine call's
// memory, its answer within the message limit and the model's answer budget, a generation's
// context within the KV cache. What can never fit is refused at once, naming the limit, and
// counted by budget in attnserve_requests_refused_total.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/architectures/model.h"
#include "engine/attention/kv_cache.h"
#include "server/core/engine_options.h"
#include "server/core/request_cost.h"
#include "server/core/task.h"
#include "server/ops/server_metrics.h"

namespace attnserve::server {

class RequestLimits {
 public:
  RequestLimits(std::string name, const Model& model, const EngineLoopOptions& options,
                int64_t kv_cache_tokens, KvBlockShape kv_block_shape, ServerMetrics& metrics);

  // INVALID_ARGUMENT or RESOURCE_EXHAUSTED, naming the limit, for a request that can never fit.
  absl::Status CheckFits(const Task& task, const RequestCost& cost) const;
  // `status`, counted as a refusal by `budget` ("tokens", "queue", ...).
  absl::Status Refuse(const char* budget, absl::Status status) const;
  // A refusal by `budget` answered elsewhere (a request pushed out of the queue).
  void Count(const char* budget) const;

 private:
  const std::string name_;
  const Model* const model_;
  const EngineLoopOptions options_;
  const int64_t kv_cache_tokens_;
  const KvBlockShape kv_block_shape_;
  ServerMetrics& metrics_;
};

}  // namespace attnserve::server
