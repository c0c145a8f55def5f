#include "server/core/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace attnserve::server {
namespace {

// A limit from a cgroup file; 0 for none ("max", or the huge number v1 writes for none).
int64_t ReadLimit(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  if (!(file >> text) || text == "max") return 0;
  int64_t bytes = 0;
  std::istringstream(text) >> bytes;
  return bytes > 0 && bytes < (int64_t{1} << 60) ? bytes : 0;
}

}  // namespace

MemoryLimit DetectMemoryLimit(int64_t flag_bytes, const std::string& cgroup_root,
                              const std::string& self_cgroup) {
  if (flag_bytes > 0) return {flag_bytes, "--memory_limit_mb"};
  // Lines "0::/path" (v2) and "N:memory:/path" (v1); inside a container's cgroup namespace the
  // path is "/" and the files sit at the root. Without one (cgroup v1: podman, Docker, and
  // Kubernetes nodes on v1) the line names the host's path, absent inside the container, whose
  // own cgroup is mounted at the root: the root's file holds its limit.
  std::ifstream cgroups(self_cgroup);
  std::string line;
  while (std::getline(cgroups, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path == "/") path.clear();
    if (controllers.empty()) {
      for (const std::string& dir :
           {cgroup_root + path, cgroup_root + "/unified" + path, cgroup_root}) {
        if (int64_t bytes = ReadLimit(dir + "/memory.max")) {
          return {bytes, dir + "/memory.max"};
        }
      }
    } else if (controllers == "memory" || controllers.find("memory,") != std::string::npos ||
               controllers.find(",memory") != std::string::npos) {
      for (const std::string& dir : {cgroup_root + "/memory" + path, cgroup_root + "/memory"}) {
        const std::string file = dir + "/memory.limit_in_bytes";
        if (int64_t bytes = ReadLimit(file)) return {bytes, file};
      }
    }
  }
  const int64_t physical =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  return {physical, "physical memory"};
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

MemoryPlan PlanMemory(const MemoryLimit& limit, int64_t resident, int models) {
  MemoryPlan plan{limit, resident, 0, 0};
  const int64_t free = std::max<int64_t>(0, limit.bytes - resident);
  // gRPC's buffers, requests waiting in the queues, the threads' stacks and what the allocator
  // keeps: a fifth of what is left, and at least 96 MiB.
  plan.reserve = std::min(free, std::max<int64_t>(free / 5, int64_t{96} << 20));
  plan.per_model = (free - plan.reserve) / std::max(models, 1);
  return plan;
}

ModelBudget SplitModelBudget(int64_t per_model, bool caches_keys) {
  if (caches_keys) return {per_model * 2 / 5, per_model * 2 / 5, per_model / 5};
  return {0, per_model * 7 / 10, per_model * 3 / 10};
}

}  // namespace attnserve::server
