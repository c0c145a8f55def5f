// attn-bench: a load generator for attnserve, in the spirit of Triton's perf_analyzer.
// `attn-bench --help` lists the modes and flags.
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/bench/load_generator.h"
#include "client/bench/report.h"
#include "client/bench/workload.h"
#include "client/cli_arguments.h"
#include "client/cli_connection.h"
#include "client/exit_codes.h"

namespace attnserve::client {
namespace {

constexpr char kUsage[] = R"(attn-bench: load an attnserve server and measure it

Usage: attn-bench [--flags]

Load, one of:
  --concurrency N           N clients, each calling again as soon as it is answered (default 1)
  --concurrency_sweep LIST  the same at each level of a comma-separated list, in turn
  --rate R                  R requests per second at even intervals, whatever the answers do;
                            latency counts from when each request was due
Each level runs --warmup seconds unmeasured, then --duration seconds or --requests requests.
A progress line goes to standard error; the results go to standard output.
)";

std::vector<FlagSpec> Flags() {
  std::vector<FlagSpec> flags = ConnectionFlags();
  const std::vector<FlagSpec> own = {
      {"model", FlagKind::kString, "demo", "the model to load"},
      {"rpc", FlagKind::kString, "next-token", "next-token, generate, score, embed or get-model"},
      {"concurrency", FlagKind::kInteger, "1", "closed-loop clients"},
      {"concurrency_sweep", FlagKind::kString, "", "closed-loop levels, e.g. 1,2,4,8,16,32"},
      {"rate", FlagKind::kNumber, "0", "open loop: requests per second"},
      {"max_in_flight", FlagKind::kInteger, "64", "open loop: most calls outstanding at once"},
      {"duration", FlagKind::kNumber, "10", "seconds measured per level"},
      {"requests", FlagKind::kInteger, "0", "measured requests per level, instead of --duration"},
      {"warmup", FlagKind::kNumber, "1", "seconds per level before measuring"},
      {"prompt_tokens", FlagKind::kString, "8",
       "prompt lengths: N, uniform:LO:HI or normal:MEAN:STDDEV"},
      {"max_tokens", FlagKind::kInteger, "32", "generate: tokens per request"},
      {"seed", FlagKind::kInteger, "1", "seed of the random prompts"},
      {"format", FlagKind::kString, "table", "table, json or csv"},
      {"help", FlagKind::kSwitch, "false", "this help"},
  };
  flags.insert(flags.end(), own.begin(), own.end());
  return flags;
}

int Usage(const std::string& message) {
  std::cerr << "attn-bench: " << message << "; see attn-bench --help\n";
  return kExitUsage;
}

int Main(int argc, char** argv) {
  QuietGrpcLogs();
  const std::vector<FlagSpec> flags = Flags();
  auto arguments = Arguments::Parse(argc, argv, flags);
  if (!arguments.ok()) return Usage(std::string(arguments.status().message()));
  if (arguments->on("help")) {
    std::cout << kUsage << "\nFlags:\n" << FlagHelp(flags) << "\n" << ExitCodeHelp();
    return kExitOk;
  }
  if (!arguments->positional().empty()) {
    return Usage(absl::StrCat("unexpected argument \"", arguments->positional()[0], "\""));
  }
  const std::string format = arguments->text("format");
  if (format != "table" && format != "json" && format != "csv") {
    return Usage("--format is table, json or csv");
  }

  std::vector<LoadLevel> levels;
  const int modes = arguments->given("concurrency") + arguments->given("concurrency_sweep") +
                    arguments->given("rate");
  if (modes > 1) return Usage("choose one of --concurrency, --concurrency_sweep and --rate");
  if (arguments->given("rate")) {
    if (arguments->number("rate") <= 0) return Usage("--rate must be positive");
    if (arguments->integer("max_in_flight") < 1) return Usage("--max_in_flight must be positive");
    levels.push_back(
        {.rate = arguments->number("rate"), .max_in_flight = arguments->integer("max_in_flight")});
  } else if (arguments->given("concurrency_sweep")) {
    for (absl::string_view part : absl::StrSplit(arguments->text("concurrency_sweep"), ',')) {
      int64_t clients;
      if (!absl::SimpleAtoi(part, &clients) || clients < 1) {
        return Usage(absl::StrCat("--concurrency_sweep: \"", part, "\" is not a positive count"));
      }
      levels.push_back({.concurrency = clients});
    }
  } else {
    if (arguments->integer("concurrency") < 1) return Usage("--concurrency must be positive");
    levels.push_back({.concurrency = arguments->integer("concurrency")});
  }
  RunLimits limits;
  limits.warmup = absl::Seconds(arguments->number("warmup"));
  limits.duration = absl::Seconds(arguments->number("duration"));
  limits.requests = arguments->integer("requests");
  if (limits.warmup < absl::ZeroDuration() || limits.requests < 0) {
    return Usage("--warmup and --requests cannot be negative");
  }
  if (limits.duration <= absl::ZeroDuration()) return Usage("--duration must be positive");
  if (arguments->integer("max_tokens") < 1) return Usage("--max_tokens must be positive");
  if (arguments->number("timeout") <= 0) return Usage("--timeout must be positive");

  auto rpc = ParseRpc(arguments->text("rpc"));
  if (!rpc.ok()) return Usage(std::string(rpc.status().message()));
  auto lengths = PromptLengths::Parse(arguments->text("prompt_tokens"));
  if (!lengths.ok()) return Usage(std::string(lengths.status().message()));
  auto client = Client::Connect(ChannelOptionsFrom(*arguments));
  if (!client.ok()) return Usage(std::string(client.status().message()));
  auto workload = Workload::Create(
      **client, {.rpc = *rpc,
                 .model = arguments->text("model"),
                 .lengths = *lengths,
                 .max_tokens = static_cast<int32_t>(arguments->integer("max_tokens")),
                 .call = CallOptionsFrom(*arguments)});
  if (!workload.ok()) {
    std::cerr << "attn-bench: " << absl::StatusCodeToString(workload.status().code()) << ": "
              << workload.status().message() << "\n";
    return ExitCodeFor(workload.status());
  }

  // On a terminal the progress line rewrites itself; in a log, a line every second.
  const bool terminal = isatty(STDERR_FILENO);
  std::vector<LevelSummary> summaries;
  for (const LoadLevel& level : levels) {
    absl::Duration last_line;
    LevelResult result = RunLevel(
        *workload, level, limits, static_cast<uint64_t>(arguments->integer("seed")),
        [&](const std::vector<Sample>& samples, absl::Duration elapsed) {
          if (terminal) {
            std::cerr << "\r" << ProgressLine(level, samples, elapsed) << "   " << std::flush;
          } else if (elapsed - last_line >= absl::Seconds(1)) {
            std::cerr << ProgressLine(level, samples, elapsed) << "\n";
            last_line = elapsed;
          }
        });
    if (terminal) std::cerr << "\n";
    summaries.push_back(Summarize(result, *rpc == Rpc::kGenerate));
  }

  // A level where every call failed measured nothing: say so in the exit code too.
  const bool all_failed = std::any_of(summaries.begin(), summaries.end(),
                                      [](const LevelSummary& s) { return s.ok == 0; });
  if (all_failed) std::cerr << "attn-bench: every call failed at a load level; see its errors\n";
  const RunInfo info{arguments->text("target"), arguments->text("model"), arguments->text("rpc"),
                     arguments->text("prompt_tokens")};
  if (format == "json") {
    PrintJson(info, summaries, std::cout);
  } else if (format == "csv") {
    PrintCsv(summaries, std::cout);
  } else {
    PrintTable(info, summaries, std::cout);
  }
  return all_failed ? kExitOther : kExitOk;
}

}  // namespace
}  // namespace attnserve::client

int main(int argc, char** argv) { return attnserve::client::Main(argc, argv); }
