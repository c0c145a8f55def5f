// The models a server answers for: every subdirectory of --model_repository, loaded at start.
// A directory that fails to load is recorded with its error and the others still serve. Names
// from requests are only ever looked up here, never joined into a filesystem path.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/core/engine_loop.h"
#include "server/core/memory_budget.h"
#include "server/core/model_methods.h"

namespace attnserve::server {

class ModelRepository {
 public:
  // Loads every model, then shares the memory the process may use (`limit`) among them
  // (PlanMemory) and starts each one's scheduler with its share.
  static std::unique_ptr<ModelRepository> Load(const std::string& root,
                                               const EngineLoopOptions& options,
                                               const MemoryLimit& limit, ServerMetrics& metrics);

  EngineLoop* Find(const std::string& name) const;
  std::vector<const EngineLoop*> workers() const;
  const std::map<std::string, std::string>& failures() const { return failures_; }
  const MemoryPlan& memory_plan() const { return plan_; }

  // Stops every model's scheduler once its accepted work is done.
  void DrainAll();

 private:
  std::map<std::string, std::unique_ptr<EngineLoop>> workers_;
  std::map<std::string, std::string> failures_;
  MemoryPlan plan_;
};

// The server-wide batching and weight settings, overridden by the model directory's optional
// serving.json ({"max_batch_size": 8, "max_queue_delay_ms": 1, "max_queue_size": 64,
//   "max_batch_tokens": 4096, "step_tokens": 1024, "prefill_chunk_tokens": 128,
//   "weights": "int8", "int8_group_size": 64, "int8_activations": false, "int4_lm_head": true,
//   "kv_cache": "bf16",
//   "prefix_cache_tokens": 0}).
absl::StatusOr<EngineLoopOptions> ServingOptionsFor(const std::string& directory,
                                                    const EngineLoopOptions& defaults);

// "float32", "int8", "int4" or "auto" (int4 or int8 for a GGUF file of quantized layers, as the
// file's bits, else float32), the --weights flag and serving.json's "weights", set on `format`.
absl::Status ParseWeightFormat(const std::string& name, WeightFormat& format);
// "float32", "f16", "bf16" or "auto" (unset: chosen by the weights, KvCacheTypeFor).
absl::Status ParseKvCacheType(const std::string& name, std::optional<KvCacheType>& type);

}  // namespace attnserve::server
