// The command-line tools' parts that need no server: flag parsing, exit codes, prompt-length
// distributions and the percentiles of a load run.
#include <gtest/gtest.h>

#include <set>

#include "client/bench/report.h"
#include "client/bench/workload.h"
#include "client/cli_arguments.h"
#include "client/exit_codes.h"

namespace attnserve::client {
namespace {

const std::vector<FlagSpec> kFlags = {
    {"name", FlagKind::kString, "x", ""},
    {"count", FlagKind::kInteger, "3", ""},
    {"ratio", FlagKind::kNumber, "0.5", ""},
    {"json", FlagKind::kSwitch, "false", ""},
};

absl::StatusOr<Arguments> Parse(std::vector<const char*> argv) {
  argv.insert(argv.begin(), "tool");
  return Arguments::Parse(static_cast<int>(argv.size()), argv.data(), kFlags);
}

TEST(ArgumentsTest, ParsesEveryFormAnywhere) {
  auto arguments = Parse({"cmd", "--name=a b", "--count", "7", "extra", "--json", "--ratio=2"});
  ASSERT_TRUE(arguments.ok()) << arguments.status();
  EXPECT_EQ(arguments->positional(), (std::vector<std::string>{"cmd", "extra"}));
  EXPECT_EQ(arguments->text("name"), "a b");
  EXPECT_EQ(arguments->integer("count"), 7);
  EXPECT_DOUBLE_EQ(arguments->number("ratio"), 2.0);
  EXPECT_TRUE(arguments->on("json"));
  EXPECT_TRUE(arguments->given("count"));
}

TEST(ArgumentsTest, DefaultsWhenNotGiven) {
  auto arguments = Parse({});
  ASSERT_TRUE(arguments.ok());
  EXPECT_EQ(arguments->integer("count"), 3);
  EXPECT_FALSE(arguments->on("json"));
  EXPECT_FALSE(arguments->given("count"));
}

TEST(ArgumentsTest, RefusesWhatItCannotRead) {
  EXPECT_EQ(Parse({"--nope"}).status().message(), "unknown flag --nope");
  EXPECT_EQ(Parse({"--count=many"}).status().message(), "--count wants an integer, not \"many\"");
  EXPECT_EQ(Parse({"--ratio", "x"}).status().message(), "--ratio wants a number, not \"x\"");
  EXPECT_EQ(Parse({"--count"}).status().message(), "--count needs a value");
  EXPECT_FALSE(Parse({"--json=maybe"}).ok());
}

TEST(ExitCodesTest, MapsStatusesToStableCodes) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("")), 3);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("")), 4);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("")), 5);
  EXPECT_EQ(ExitCodeFor(absl::DeadlineExceededError("")), 6);
  EXPECT_EQ(ExitCodeFor(absl::UnauthenticatedError("")), 7);
  EXPECT_EQ(ExitCodeFor(absl::FailedPreconditionError("")), 8);
  EXPECT_EQ(ExitCodeFor(absl::InternalError("")), 1);
}

TEST(PromptLengthsTest, SamplesWithinEachDistribution) {
  std::mt19937_64 rng(1);
  auto fixed = PromptLengths::Parse("12");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->Sample(rng), 12);

  auto uniform = PromptLengths::Parse("uniform:4:9");
  ASSERT_TRUE(uniform.ok());
  std::set<int64_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(uniform->Sample(rng));
  EXPECT_EQ(seen, (std::set<int64_t>{4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(uniform->max(), 9);

  auto normal = PromptLengths::Parse("normal:20:5");
  ASSERT_TRUE(normal.ok());
  double sum = 0;
  for (int i = 0; i < 2000; ++i) {
    const int64_t length = normal->Sample(rng);
    ASSERT_GE(length, 1);
    ASSERT_LE(length, normal->max());
    sum += static_cast<double>(length);
  }
  EXPECT_NEAR(sum / 2000, 20.0, 0.5);

  for (const char* bad : {"0", "-3", "uniform:9:4", "normal:5", "zipf:1:2", "x"}) {
    EXPECT_FALSE(PromptLengths::Parse(bad).ok()) << bad;
  }
}

Sample Answered(absl::Duration latency, absl::StatusCode code = absl::StatusCode::kOk) {
  Sample sample;
  sample.latency = latency;
  sample.code = code;
  return sample;
}

TEST(ReportTest, PercentilesAndErrorsOfALevel) {
  LevelResult result;
  result.level.concurrency = 2;
  result.elapsed = absl::Seconds(2);
  for (int ms = 1; ms <= 100; ++ms) {
    result.samples.push_back(Answered(absl::Milliseconds(ms)));
  }
  result.samples.push_back(Answered(absl::Milliseconds(1000), absl::StatusCode::kUnavailable));
  const LevelSummary summary = Summarize(result, /*streaming=*/false);
  EXPECT_EQ(summary.ok, 100);
  EXPECT_EQ(summary.errors.at("UNAVAILABLE"), 1);
  EXPECT_DOUBLE_EQ(summary.requests_per_second, 50.0);
  EXPECT_DOUBLE_EQ(summary.latency.p50, 50.0);
  EXPECT_DOUBLE_EQ(summary.latency.p90, 90.0);
  EXPECT_DOUBLE_EQ(summary.latency.p99, 99.0);
  EXPECT_DOUBLE_EQ(summary.latency.max, 100.0);  // the failed call's time is not a latency
}

TEST(ReportTest, StreamingTimesTokens) {
  LevelResult result;
  result.elapsed = absl::Seconds(1);
  Sample sample = Answered(absl::Milliseconds(30));
  sample.tokens = 3;
  sample.first_token = absl::Milliseconds(10);
  sample.token_gaps = {absl::Milliseconds(5), absl::Milliseconds(15)};
  result.samples.push_back(sample);
  result.samples.push_back(Answered(absl::Milliseconds(2)));  // ended before any token
  const LevelSummary summary = Summarize(result, /*streaming=*/true);
  EXPECT_EQ(summary.ok, 2);
  EXPECT_DOUBLE_EQ(summary.first_token.p50, 10.0);
  EXPECT_DOUBLE_EQ(summary.first_token.max, 10.0);
  EXPECT_DOUBLE_EQ(summary.inter_token.p50, 5.0);
  EXPECT_DOUBLE_EQ(summary.inter_token.max, 15.0);
  EXPECT_DOUBLE_EQ(summary.tokens_per_second, 3.0);
}

}  // namespace
}  // namespace attnserve::client
