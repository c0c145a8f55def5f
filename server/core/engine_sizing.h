// What a model's engine loop can hold within its share of memory (options.budget): the tokens
// of one engine call (what one sequence's activations fit, at most --max_batch_tokens), the
// step budgets within that, and a KV cache pool of as many blocks as its budget holds. A budget
// that cannot hold the model's context, or one request of it, is refused, saying which flag to
// raise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/architectures/model.h"
#include "engine/attention/kv_block_pool.h"
#include "server/core/engine_options.h"

namespace attnserve::server {

struct EngineSizing {
  EngineLoopOptions options;          // with max_batch_tokens and the step budgets fitted
  std::unique_ptr<KvBlockPool> pool;  // null for a model that does not generate
};

absl::StatusOr<EngineSizing> SizeEngine(const std::string& name, const Model& model,
                                        EngineLoopOptions options);

// The KV cache type `options` choose for a model of `config`.
KvCacheType KvCacheTypeFor(const EngineLoopOptions& options, const ModelConfig& config);

// "12.5 MiB", for messages.
std::string Megabytes(int64_t bytes);

}  // namespace attnserve::server
