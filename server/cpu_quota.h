// How many compute threads the container may use: its CPU quota (cgroup v2 cpu.max or v1
// cfs_quota_us / cfs_period_us, as Kubernetes limits set them), else the CPUs this process may
// run on. Never the host's core count alone.
#pragma once

namespace attnserve::server {

int AvailableCpus();

}  // namespace attnserve::server
