// How many compute threads the container may use: its CPU quota (cgroup v2 cpu.max or v1
// cfs_quota_us / cfs_period_us, as Kubernetes limits set them), else the CPUs this process may
// run on. Never the host's core count alone.
#pragma once

#include <string>

namespace attnserve::server {

int AvailableCpus();

// CPUs allowed by the cgroup files under `root` (cgroup v2 cpu.max, else v1
// cpu/cpu.cfs_quota_us and cpu.cfs_period_us), rounded up; 0 when unlimited or unreadable.
int CgroupCpuQuota(const std::string& root = "/sys/fs/cgroup");

}  // namespace attnserve::server
