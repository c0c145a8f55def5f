// attn-bench's results: per load level, throughput, latency percentiles, errors by status code
// and, for Generate, time to first token and inter-token latency; as a table, JSON or CSV.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "client/bench/load_generator.h"

namespace attnserve::client {

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;  // milliseconds
};

struct LevelSummary {
  LoadLevel level;
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;  // by status code name
  double seconds = 0;
  double requests_per_second = 0;  // answered successfully
  Percentiles latency;             // successful calls
  bool streaming = false;          // Generate: the fields below are set
  Percentiles first_token, inter_token;
  double tokens_per_second = 0;
};

LevelSummary Summarize(const LevelResult& result, bool streaming);

// The one-line progress of a running level.
std::string ProgressLine(const LoadLevel& level, const std::vector<Sample>& samples,
                         absl::Duration elapsed);

struct RunInfo {
  std::string target, model, rpc, prompt_tokens;
};
void PrintTable(const RunInfo& info, const std::vector<LevelSummary>& levels, std::ostream& out);
void PrintJson(const RunInfo& info, const std::vector<LevelSummary>& levels, std::ostream& out);
void PrintCsv(const std::vector<LevelSummary>& levels, std::ostream& out);

}  // namespace attnserve::client
