// Unit tests of the server's pieces that the end-to-end tests cannot reach directly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "server/cpu_quota.h"
#include "server/model_repository.h"

namespace attnserve::server {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(CpuQuotaTest, ReadsCgroupV2AndV1AndUnlimited) {
  const fs::path v2 = TempDir("cgroup_v2");
  Write(v2 / "cpu.max", "150000 100000\n");
  EXPECT_EQ(CgroupCpuQuota(v2.string()), 2);  // 1.5 CPUs rounds up
  Write(v2 / "cpu.max", "max 100000\n");
  EXPECT_EQ(CgroupCpuQuota(v2.string()), 0);

  const fs::path v1 = TempDir("cgroup_v1");
  Write(v1 / "cpu" / "cpu.cfs_quota_us", "400000\n");
  Write(v1 / "cpu" / "cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CgroupCpuQuota(v1.string()), 4);
  Write(v1 / "cpu" / "cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(CgroupCpuQuota(v1.string()), 0);

  EXPECT_EQ(CgroupCpuQuota(TempDir("cgroup_none").string()), 0);
  EXPECT_GE(AvailableCpus(), 1);
}

TEST(ServingOptionsTest, ServingJsonOverridesTheFlags) {
  WorkerOptions defaults;
  defaults.max_batch_size = 32;
  const fs::path dir = TempDir("serving_json");
  auto unchanged = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(unchanged.ok());
  EXPECT_EQ(unchanged->max_batch_size, 32);

  Write(dir / "serving.json", R"({"max_batch_size": 4, "max_queue_delay_ms": 3})");
  auto options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_batch_size, 4);
  EXPECT_EQ(options->max_queue_delay, absl::Milliseconds(3));
  EXPECT_EQ(options->max_queue_size, defaults.max_queue_size);

  for (const auto& [text, fragment] : std::vector<std::pair<std::string, std::string>>{
           {R"({"max_batch_size": 0})", "max_batch_size must be a positive"},
           {R"({"max_queue_delay_ms": -1})", "max_queue_delay_ms must be a non-negative"},
           {R"({"batch": 2})", "batch is not a known setting"},
           {R"([1])", "not a JSON object"}}) {
    Write(dir / "serving.json", text);
    auto refused = ServingOptionsFor(dir.string(), defaults);
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_TRUE(absl::StrContains(refused.status().message(), fragment)) << refused.status();
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "serving.json"));
  }
}

}  // namespace
}  // namespace attnserve::server
