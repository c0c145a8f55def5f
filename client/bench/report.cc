#include "client/bench/report.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli_table.h"

namespace attnserve::client {
namespace {

Percentiles Of(std::vector<double> ms) {
  Percentiles p;
  if (ms.empty()) return p;
  std::sort(ms.begin(), ms.end());
  // Nearest rank: the smallest value with at least q of the samples at or below it.
  auto at = [&](double q) {
    const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(ms.size())));
    return ms[std::clamp<size_t>(rank, 1, ms.size()) - 1];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.max = ms.back();
  return p;
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

std::string LevelName(const LoadLevel& level) {
  return level.rate > 0 ? absl::StrFormat("%g/s", level.rate) : absl::StrCat(level.concurrency);
}

nlohmann::json Json(const Percentiles& p) {
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"max", p.max}};
}

std::string F(double value) { return absl::StrFormat("%.2f", value); }

}  // namespace

LevelSummary Summarize(const LevelResult& result, bool streaming) {
  LevelSummary summary;
  summary.level = result.level;
  summary.streaming = streaming;
  summary.seconds = absl::ToDoubleSeconds(result.elapsed);
  std::vector<double> latency, first, gaps;
  int64_t tokens = 0;
  for (const Sample& sample : result.samples) {
    if (sample.code != absl::StatusCode::kOk) {
      ++summary.errors[absl::StatusCodeToString(sample.code)];
      continue;
    }
    ++summary.ok;
    latency.push_back(Ms(sample.latency));
    if (streaming && sample.tokens > 0) {
      first.push_back(Ms(sample.first_token));
      for (absl::Duration gap : sample.token_gaps) gaps.push_back(Ms(gap));
      tokens += sample.tokens;
    }
  }
  if (summary.seconds > 0) {
    summary.requests_per_second = static_cast<double>(summary.ok) / summary.seconds;
    summary.tokens_per_second = static_cast<double>(tokens) / summary.seconds;
  }
  summary.latency = Of(std::move(latency));
  summary.first_token = Of(std::move(first));
  summary.inter_token = Of(std::move(gaps));
  return summary;
}

std::string ProgressLine(const LoadLevel& level, const std::vector<Sample>& samples,
                         absl::Duration elapsed) {
  int64_t ok = 0;
  std::vector<double> latency;
  for (const Sample& sample : samples) {
    if (sample.code == absl::StatusCode::kOk) {
      ++ok;
      latency.push_back(Ms(sample.latency));
    }
  }
  const Percentiles p = Of(std::move(latency));
  return absl::StrFormat("[%s %s] %5.1f s  %lld ok  %lld errors  %.1f req/s  p50 %.2f ms",
                         level.rate > 0 ? "rate" : "concurrency", LevelName(level),
                         absl::ToDoubleSeconds(elapsed), ok,
                         static_cast<long long>(samples.size()) - ok,
                         static_cast<double>(ok) / absl::ToDoubleSeconds(elapsed), p.p50);
}

void PrintTable(const RunInfo& info, const std::vector<LevelSummary>& levels, std::ostream& out) {
  out << info.rpc << " on " << info.model << " at " << info.target << ", prompts of "
      << info.prompt_tokens << " tokens; latency in ms\n";
  const bool streaming = !levels.empty() && levels[0].streaming;
  std::vector<std::string> headers = {"LOAD", "OK", "ERRORS", "REQ/S", "P50", "P90", "P99", "MAX"};
  if (streaming) {
    for (const char* h : {"TTFT P50", "TTFT P99", "ITL P50", "ITL P99", "TOKENS/S"}) {
      headers.push_back(h);
    }
  }
  Table table(headers, std::vector<bool>(headers.size(), true));
  for (const LevelSummary& level : levels) {
    int64_t errors = 0;
    for (const auto& [code, count] : level.errors) errors += count;
    std::vector<std::string> row = {
        LevelName(level.level), absl::StrCat(level.ok),
        absl::StrCat(errors),   absl::StrFormat("%.1f", level.requests_per_second),
        F(level.latency.p50),   F(level.latency.p90),
        F(level.latency.p99),   F(level.latency.max)};
    if (streaming) {
      for (double v : {level.first_token.p50, level.first_token.p99, level.inter_token.p50,
                       level.inter_token.p99}) {
        row.push_back(F(v));
      }
      row.push_back(absl::StrFormat("%.1f", level.tokens_per_second));
    }
    table.Add(row);
  }
  table.Print(out);
  for (const LevelSummary& level : levels) {
    for (const auto& [code, count] : level.errors) {
      out << "load " << LevelName(level.level) << ": " << count << " x " << code << "\n";
    }
  }
}

void PrintJson(const RunInfo& info, const std::vector<LevelSummary>& levels, std::ostream& out) {
  nlohmann::json json = {{"target", info.target},
                         {"model", info.model},
                         {"rpc", info.rpc},
                         {"prompt_tokens", info.prompt_tokens},
                         {"levels", nlohmann::json::array()}};
  for (const LevelSummary& level : levels) {
    nlohmann::json entry = {{"concurrency", level.level.concurrency},
                            {"rate", level.level.rate},
                            {"ok", level.ok},
                            {"errors", level.errors},
                            {"seconds", level.seconds},
                            {"requests_per_second", level.requests_per_second},
                            {"latency_ms", Json(level.latency)}};
    if (level.streaming) {
      entry["time_to_first_token_ms"] = Json(level.first_token);
      entry["inter_token_latency_ms"] = Json(level.inter_token);
      entry["tokens_per_second"] = level.tokens_per_second;
    }
    json["levels"].push_back(entry);
  }
  out << json.dump(2) << "\n";
}

void PrintCsv(const std::vector<LevelSummary>& levels, std::ostream& out) {
  out << "concurrency,rate,ok,errors,seconds,requests_per_second,p50_ms,p90_ms,p99_ms,max_ms,"
         "ttft_p50_ms,ttft_p99_ms,itl_p50_ms,itl_p99_ms,tokens_per_second\n";
  for (const LevelSummary& level : levels) {
    int64_t errors = 0;
    for (const auto& [code, count] : level.errors) errors += count;
    out << absl::StrFormat("%d,%g,%d,%d,%.3f,%.2f,%.3f,%.3f,%.3f,%.3f", level.level.concurrency,
                           level.level.rate, level.ok, errors, level.seconds,
                           level.requests_per_second, level.latency.p50, level.latency.p90,
                           level.latency.p99, level.latency.max);
    if (level.streaming) {
      out << absl::StrFormat(",%.3f,%.3f,%.3f,%.3f,%.2f\n", level.first_token.p50,
                             level.first_token.p99, level.inter_token.p50, level.inter_token.p99,
                             level.tokens_per_second);
    } else {
      out << ",,,,,\n";  // no tokens to time
    }
  }
}

}  // namespace attnserve::client
