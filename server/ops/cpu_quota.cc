#include "server/ops/cpu_quota.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

namespace attnserve::server {
int CgroupCpuQuota(const std::string& root) {
  std::ifstream v2(root + "/cpu.max");
  std::string quota;
  double period = 0;
  if (v2 >> quota >> period) {
    if (quota == "max" || period <= 0) return 0;
    return static_cast<int>(std::ceil(std::stod(quota) / period));
  }
  std::ifstream v1_quota(root + "/cpu/cpu.cfs_quota_us");
  std::ifstream v1_period(root + "/cpu/cpu.cfs_period_us");
  double q = 0;
  if (v1_quota >> q && v1_period >> period && q > 0 && period > 0) {
    return static_cast<int>(std::ceil(q / period));
  }
  return 0;
}

int AvailableCpus() {
  cpu_set_t set;
  int affinity = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) affinity = CPU_COUNT(&set);
  affinity = std::max(affinity, 1);
  const int quota = CgroupCpuQuota();
  return quota > 0 ? std::min(quota, affinity) : affinity;
}

}  // namespace attnserve::server
