// The memory the process may use, and how it is shared out before any request arrives
// (docs/serving.md, "The resource model"). Every admitted request's cost is then held against
// its model's share, so that no mix of legal requests takes the process past the limit.
#pragma once

#include <cstdint>
#include <string>

namespace attnserve::server {

struct MemoryLimit {
  int64_t bytes = 0;
  std::string source;  // where the figure came from, for the start-up log
};

// The process's memory limit: `flag_bytes` when positive, else its cgroup's limit (v2
// memory.max, or v1 memory.limit_in_bytes, of the cgroup /proc/self/cgroup names, or at the
// hierarchy's root, where a container without a cgroup namespace finds its own), else the
// machine's physical memory.
MemoryLimit DetectMemoryLimit(int64_t flag_bytes, const std::string& cgroup_root = "/sys/fs/cgroup",
                              const std::string& self_cgroup = "/proc/self/cgroup");

// The process's resident memory now.
int64_t ResidentBytes();

// One model's share: what its scheduler may hold at once.
struct ModelBudget {
  int64_t kv_cache_bytes = 0;    // the paged KV cache's pool
  int64_t activation_bytes = 0;  // the peak of one engine call
  int64_t response_bytes = 0;    // answers computed and not yet sent
};

struct MemoryPlan {
  MemoryLimit limit;
  int64_t resident = 0;  // with every model loaded
  int64_t reserve = 0;   // gRPC's buffers, queued requests, allocator slack
  int64_t per_model = 0;
};

// Shares what the limit leaves after `resident` and the reserve equally among `models`.
MemoryPlan PlanMemory(const MemoryLimit& limit, int64_t resident, int models);

// A model's share split by use: models that cache keys give 40% to the KV cache, 40% to
// activations and 20% to answers; the others 70% to activations and 30% to answers.
ModelBudget SplitModelBudget(int64_t per_model, bool caches_keys);

}  // namespace attnserve::server
