// Unit tests of the server's pieces that the end-to-end tests cannot reach directly.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "server/core/answer_writer.h"
#include "server/core/completion_estimate.h"
#include "server/core/memory_budget.h"
#include "server/core/prefill_pacing.h"
#include "server/core/sampling.h"
#include "server/frontend/model_repository.h"
#include "server/ops/cpu_quota.h"
#include "server/ops/memory_trimmer.h"

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

// Holes inside the heap, which glibc never returns by itself (blocks still in use pin its top),
// go back to the system once the engine has been idle for an interval.
TEST(AnswerWriterTest, RunsWhatIsPostedInOrderOnItsOwnThreadAndAllOfItBeforeItGoes) {
  std::vector<int> order;
  std::atomic<int> elsewhere{0};
  const std::thread::id poster = std::this_thread::get_id();
  {
    AnswerWriter writer;
    for (int i = 0; i < 100; ++i) {
      writer.Post([&, i] {
        if (std::this_thread::get_id() != poster) ++elsewhere;
        order.push_back(i);  // the writer's thread alone touches it
      });
    }
  }  // the destructor runs what is still queued, then joins
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(elsewhere.load(), 100);
}

// GCC and clang name a sanitized build differently.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ATTNSERVE_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ATTNSERVE_SANITIZER_ALLOCATOR 1
#endif
#endif

TEST(MemoryTrimmerTest, HandsBackFreeMemoryWhenTheEngineIsIdle) {
#ifdef ATTNSERVE_SANITIZER_ALLOCATOR
  GTEST_SKIP() << "the sanitizers' allocators replace glibc's, which this trims";
#endif
  std::vector<char*> blocks(40000);
  for (char*& block : blocks) {
    block = static_cast<char*>(std::malloc(4000));
    std::memset(block, 1, 4000);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i % 64 != 63) std::free(std::exchange(blocks[i], nullptr));
  }
  ASSERT_GT(MemoryTrimmer::FreeBytesHeld(), int64_t{100} << 20);
  const int64_t resident = ResidentBytes();
  {
    MemoryTrimmer trimmer({absl::Milliseconds(20), absl::Seconds(30), int64_t{64} << 20});
    absl::SleepFor(absl::Milliseconds(300));
  }
  EXPECT_LT(ResidentBytes(), resident - (int64_t{100} << 20));
  for (char* block : blocks) std::free(block);
}

TEST(MemoryLimitTest, ReadsTheCgroupThatProcSelfCgroupNames) {
  const fs::path v2 = TempDir("memory_v2");
  Write(v2 / "self", "0::/pods/server\n");
  Write(v2 / "root" / "pods" / "server" / "memory.max", "1073741824\n");
  MemoryLimit limit = DetectMemoryLimit(0, (v2 / "root").string(), (v2 / "self").string());
  EXPECT_EQ(limit.bytes, int64_t{1} << 30);
  EXPECT_EQ(limit.source, (v2 / "root" / "pods" / "server" / "memory.max").string());

  const fs::path v1 = TempDir("memory_v1");
  Write(v1 / "self", "5:cpu,cpuacct:/x\n4:memory:/slice/server\n");
  Write(v1 / "root" / "memory" / "slice" / "server" / "memory.limit_in_bytes", "536870912\n");
  limit = DetectMemoryLimit(0, (v1 / "root").string(), (v1 / "self").string());
  EXPECT_EQ(limit.bytes, int64_t{512} << 20);

  EXPECT_EQ(
      DetectMemoryLimit(int64_t{3} << 20, (v1 / "root").string(), (v1 / "self").string()).source,
      "--memory_limit_mb");
}

// A container on cgroup v1 with no cgroup namespace (podman, Docker, Kubernetes nodes on v1):
// /proc/self/cgroup names the host's path, and the container's own cgroup is at the root. Before,
// the server missed the limit and planned for the machine's memory (found by make kube-test).
TEST(MemoryLimitTest, AContainerWithoutACgroupNamespaceFindsItsLimitAtTheRoot) {
  const fs::path v1 = TempDir("memory_v1_container");
  Write(v1 / "self", "4:memory:/libpod_parent/pod/libpod-0123\n");
  Write(v1 / "root" / "memory" / "memory.limit_in_bytes", "2147483648\n");
  MemoryLimit limit = DetectMemoryLimit(0, (v1 / "root").string(), (v1 / "self").string());
  EXPECT_EQ(limit.bytes, int64_t{2} << 30);
  EXPECT_EQ(limit.source, (v1 / "root" / "memory" / "memory.limit_in_bytes").string());

  const fs::path v2 = TempDir("memory_v2_container");
  Write(v2 / "self", "0::/system.slice/container-0123.scope\n");
  Write(v2 / "root" / "memory.max", "268435456\n");
  limit = DetectMemoryLimit(0, (v2 / "root").string(), (v2 / "self").string());
  EXPECT_EQ(limit.bytes, int64_t{256} << 20);

  // No limit anywhere (v1 writes a huge number): the machine's memory.
  Write(v1 / "root" / "memory" / "memory.limit_in_bytes", "9223372036854771712\n");
  limit = DetectMemoryLimit(0, (v1 / "root").string(), (v1 / "self").string());
  EXPECT_EQ(limit.source, "physical memory");
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
  EngineLoopOptions defaults;
  defaults.max_batch_size = 32;
  const fs::path dir = TempDir("serving_json");
  auto unchanged = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(unchanged.ok());
  EXPECT_EQ(unchanged->max_batch_size, 32);

  Write(dir / "serving.json",
        R"({"max_batch_size": 4, "max_queue_delay_ms": 3, "step_tokens": 512})");
  auto options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_batch_size, 4);
  EXPECT_EQ(options->max_queue_delay, absl::Milliseconds(3));
  EXPECT_EQ(options->step_tokens, 512);
  EXPECT_EQ(options->max_queue_size, defaults.max_queue_size);
  EXPECT_FALSE(options->weights.quantized);

  EXPECT_TRUE(options->weights.int8_activations);
  Write(dir / "serving.json",
        R"({"weights": "int8", "int8_group_size": 0, "int8_activations": false})");
  options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->weights.quantized);
  EXPECT_EQ(options->weights.group_size, 0);
  EXPECT_FALSE(options->weights.automatic);
  EXPECT_FALSE(options->weights.int8_activations);
  EXPECT_EQ(options->weights.bits, 8);

  EXPECT_FALSE(options->weights.int4_lm_head);
  Write(dir / "serving.json", R"({"weights": "int4", "int4_lm_head": true})");
  options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->weights.quantized);
  EXPECT_EQ(options->weights.bits, 4);
  EXPECT_TRUE(options->weights.int4_lm_head);
  EXPECT_EQ(LmHeadFormat(options->weights).bits, 4);
  EXPECT_EQ(LmHeadFormat(defaults.weights).bits, defaults.weights.bits);

  Write(dir / "serving.json", R"({"weights": "bf16"})");
  options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->weights.bf16);
  EXPECT_FALSE(options->weights.quantized);
  EXPECT_STREQ(WeightFormatName(options->weights), "bf16");

  // "auto" leaves the choice to the load (int4 or int8 for a GGUF file of quantized layers).
  Write(dir / "serving.json", R"({"weights": "auto"})");
  options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->weights.automatic);
  EXPECT_FALSE(options->weights.quantized);
  Write(dir / "serving.json", R"({"weights": "float32"})");
  options = ServingOptionsFor(dir.string(), *options);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->weights.automatic);

  // The KV cache's type: bf16 or float32, or auto (chosen by the loaded weights).
  EXPECT_FALSE(options->kv_cache.has_value());
  Write(dir / "serving.json", R"({"kv_cache": "bf16"})");
  options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->kv_cache, KvCacheType::kBf16);
  EXPECT_EQ(KvCacheTypeFor(*options, ModelConfig{}), KvCacheType::kBf16);
  Write(dir / "serving.json", R"({"kv_cache": "float32"})");
  options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->kv_cache, KvCacheType::kFloat32);
  Write(dir / "serving.json", R"({"kv_cache": "auto"})");
  options = ServingOptionsFor(dir.string(), *options);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->kv_cache.has_value());
  ModelConfig config;
  EXPECT_EQ(KvCacheTypeFor(*options, config), KvCacheType::kFloat32);
  config.weights.quantized = true;
  EXPECT_EQ(KvCacheTypeFor(*options, config), KvCacheType::kF16);
  Write(dir / "serving.json", R"({"prefix_cache_tokens": 0})");
  options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->prefix_cache_tokens, 0);
  Write(dir / "serving.json", R"({"kv_cache": "f16"})");
  options = ServingOptionsFor(dir.string(), defaults);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->kv_cache, KvCacheType::kF16);

  for (const auto& [text, fragment] : std::vector<std::pair<std::string, std::string>>{
           {R"({"kv_cache": "fp8"})",
            "\"fp8\" is not a KV cache type (float32, f16, bf16 or auto)"},
           {R"({"weights": "int2"})",
            "\"int2\" is not a weight format (float32, bf16, int8, int4 or auto)"},
           {R"({"int4_lm_head": 1})", "int4_lm_head must be true or false"},
           {R"({"weights": 8})", "field weights"},
           {R"({"int8_group_size": -32})", "int8_group_size must be a non-negative"},
           {R"({"int8_activations": 1})", "int8_activations must be true or false"},
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

TEST(CompletionEstimateTest, CountsTheRunningIterationTheWorkAheadAndAFullBatch) {
  CompletionEstimate estimate;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  // Nothing measured yet: no estimate, whatever waits.
  EXPECT_EQ(estimate.Completion(t0, 50, 500, 10, 4), absl::InfinitePast());
  // One iteration of 100 ms over 1000 tokens: 100 µs per token.
  estimate.IterationStarted(t0, 1000);
  estimate.IterationEnded(t0 + absl::Milliseconds(100), 1000);
  EXPECT_EQ(estimate.Alone(50), absl::Milliseconds(5));
  // Idle (nothing running, nothing queued): no estimate, the request just runs.
  EXPECT_EQ(estimate.Completion(t0, 0, 0, 10, 4), absl::InfinitePast());
  // 9 requests of 100 tokens ahead, batches of 4: 90 ms for them; the request shares the third
  // batch with the ninth and two more of its own size: 30 ms.
  EXPECT_EQ(estimate.Completion(t0, 9, 900, 100, 4), t0 + absl::Milliseconds(120));
  // An iteration of 1000 tokens 40 ms under way has 60 ms left; then a batch of 4 x 100 tokens.
  estimate.IterationStarted(t0, 1000);
  EXPECT_EQ(estimate.Completion(t0 + absl::Milliseconds(40), 0, 0, 100, 4),
            t0 + absl::Milliseconds(140));
  // A slower iteration counts at once (500 ms over 1000 tokens); a faster one moves the average
  // a quarter of the way (to 0.75 x 200 + 0.25 x 40 = 160 ms per 1000 tokens).
  estimate.IterationEnded(t0 + absl::Milliseconds(500), 1000);
  EXPECT_EQ(estimate.Alone(1000), absl::Milliseconds(500));
  estimate.IterationStarted(t0, 1000);
  estimate.IterationEnded(t0 + absl::Milliseconds(40), 1000);
  EXPECT_EQ(estimate.Alone(1000), absl::Milliseconds(160));
  // The cost is per prompt token through the engine, generations' prompt chunks included: an
  // iteration begun with 10 tokens of requests that fed 1000 in all.
  estimate.IterationStarted(t0, 10);
  estimate.IterationEnded(t0 + absl::Milliseconds(160), 1000);
  EXPECT_EQ(estimate.Alone(1000), absl::Milliseconds(160));
}

TEST(PrefillPacingTest, TheFullBudgetUntilBothCallsAreMeasured) {
  PrefillPacing pacing(1.0, 32, 256);
  EXPECT_EQ(pacing.tokens(), 256);
  pacing.Observe(absl::Milliseconds(20), absl::ZeroDuration(), 0);
  EXPECT_EQ(pacing.tokens(), 256) << "no prompt work measured yet";
}

// The budget after one step whose decode call took `decode` and whose 128 prompt tokens took
// 0.5 ms each.
int64_t BudgetAfterOneStep(double ratio, int64_t min_tokens, int64_t max_tokens,
                           absl::Duration decode) {
  PrefillPacing pacing(ratio, min_tokens, max_tokens);
  pacing.Observe(decode, absl::Milliseconds(64), 128);
  return pacing.tokens();
}

TEST(PrefillPacingTest, OtherWorkTakesAboutTheDecodeCallsTime) {
  EXPECT_EQ(BudgetAfterOneStep(1.0, 32, 256, absl::Milliseconds(30)), 60);
  EXPECT_EQ(BudgetAfterOneStep(2.0, 32, 256, absl::Milliseconds(30)), 120);
}

TEST(PrefillPacingTest, StaysWithinItsBoundsAndZeroTurnsItOff) {
  EXPECT_EQ(BudgetAfterOneStep(1.0, 32, 256, absl::Milliseconds(2)), 32);
  EXPECT_EQ(BudgetAfterOneStep(1.0, 32, 256, absl::Seconds(1)), 256);
  EXPECT_EQ(BudgetAfterOneStep(0.0, 32, 256, absl::Milliseconds(2)), 256);
  // A minimum above the maximum gives way.
  EXPECT_EQ(BudgetAfterOneStep(1.0, 32, 8, absl::Milliseconds(2)), 8);
}

TEST(PrefillPacingTest, FollowsTheMeasuredTimesAQuarterAStep) {
  PrefillPacing pacing(1.0, 1, 1000);
  pacing.Observe(absl::Milliseconds(40), absl::Milliseconds(100), 100);  // 1 ms a token
  EXPECT_EQ(pacing.tokens(), 40);
  // The decode call got twice as slow: 0.75·40 + 0.25·80 = 50 ms.
  pacing.Observe(absl::Milliseconds(80), absl::ZeroDuration(), 0);
  EXPECT_EQ(pacing.tokens(), 50);
  // A small chunk's fixed cost is shared out by tokens: (0.75·100 + 0.25·30) ms over
  // (0.75·100 + 0.25·10) tokens = 82.5 / 77.5 ms a token: 50 / (82.5 / 77.5) = 46.97.
  pacing.Observe(absl::ZeroDuration(), absl::Milliseconds(30), 10);
  EXPECT_EQ(pacing.tokens(), 47);
}

}  // namespace
}  // namespace attnserve::server

namespace attnserve::server {
namespace {

// How often each of 6 tokens is drawn in `draws` samples.
std::vector<double> Frequencies(const std::vector<float>& logits, GenerateOptions options,
                                int draws = 40000) {
  std::mt19937_64 rng(7);
  std::vector<double> counts(logits.size());
  for (int i = 0; i < draws; ++i) {
    counts[Sample(logits.data(), static_cast<int64_t>(logits.size()), options, rng)] += 1.0;
  }
  for (double& count : counts) count /= draws;
  return counts;
}

TEST(SamplingTest, DrawsFromTheSoftmaxOfTheLogitsOverTheTemperature) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f,
                                     2.5f, 0.0f, -std::numeric_limits<float>::infinity()};
  for (float temperature : {1.0f, 0.5f, 2.0f}) {
    GenerateOptions options;
    options.temperature = temperature;
    std::vector<double> expected(logits.size());
    double total = 0.0;
    for (size_t i = 0; i < logits.size(); ++i)
      total += expected[i] = std::exp(logits[i] / temperature);
    const std::vector<double> drawn = Frequencies(logits, options);
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(drawn[i], expected[i] / total, 0.01) << "token " << i << " at " << temperature;
    }
    EXPECT_EQ(drawn[5], 0.0) << "a forbidden token (-inf) is never drawn";
  }
  GenerateOptions greedy;  // temperature 0
  EXPECT_EQ(Frequencies(logits, greedy, 10)[1], 1.0);
}

TEST(SamplingTest, TopKAndTopPKeepTheMostLikelyTokens) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 2.5f, 0.0f, 2.9f};
  GenerateOptions top_k;
  top_k.temperature = 1.0f;
  top_k.top_k = 2;  // tokens 1 and 5, in proportion
  std::vector<double> drawn = Frequencies(logits, top_k);
  const double one = std::exp(3.0), five = std::exp(2.9);
  EXPECT_NEAR(drawn[1], one / (one + five), 0.01);
  EXPECT_NEAR(drawn[5], five / (one + five), 0.01);
  EXPECT_EQ(drawn[0] + drawn[2] + drawn[3] + drawn[4], 0.0);
  // top_p: the smallest set of the most likely whose probability reaches p.
  GenerateOptions top_p;
  top_p.temperature = 1.0f;
  top_p.top_p = 0.75f;  // 1 (0.37), 5 (0.33): 0.70 < 0.75, so 3 (0.22) joins
  drawn = Frequencies(logits, top_p);
  EXPECT_GT(drawn[3], 0.0);
  EXPECT_EQ(drawn[0] + drawn[2] + drawn[4], 0.0);
  top_p.top_k = 2;  // both: the top 2, then their nucleus
  drawn = Frequencies(logits, top_p);
  EXPECT_EQ(drawn[3], 0.0);
  EXPECT_GT(drawn[5], 0.0);
}

TEST(SamplingTest, TheNucleusOfALargeVocabularyIsFoundBeyondTheFirstSortedTokens) {
  // 2000 equally likely tokens: top_p 0.5 keeps 1000 of them, more than one sorted round.
  std::vector<float> logits(2000, 0.0f);
  GenerateOptions options;
  options.temperature = 1.0f;
  options.top_p = 0.5f;
  std::mt19937_64 rng(3);
  std::vector<bool> seen(logits.size());
  for (int i = 0; i < 4000; ++i) seen[Sample(logits.data(), 2000, options, rng)] = true;
  const auto distinct = std::count(seen.begin(), seen.end(), true);
  EXPECT_GT(distinct, 900);
  EXPECT_LE(distinct, 1001);
}

}  // namespace
}  // namespace attnserve::server
