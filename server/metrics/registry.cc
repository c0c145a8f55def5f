#include "server/metrics/registry.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnserve::metrics {
namespace {

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", value);
}

// {a="x",b="y"} with an optional extra label appended (the histogram's le).
std::string FormatLabels(const Labels& labels, const std::string& extra_name = "",
                         const std::string& extra_value = "") {
  std::vector<std::string> parts;
  for (const auto& [name, value] : labels) {
    parts.push_back(absl::StrCat(name, "=\"", EscapeLabelValue(value), "\""));
  }
  if (!extra_name.empty()) parts.push_back(absl::StrCat(extra_name, "=\"", extra_value, "\""));
  if (parts.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "," : "") + parts[i];
  return out + "}";
}

void Header(std::string& out, const std::string& name, const std::string& help, const char* type) {
  absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  std::lock_guard lock(mutex_);
  uint64_t running = 0;
  for (uint64_t count : counts_) {
    running += count;
    snapshot.cumulative.push_back(running);
  }
  snapshot.sum = sum_;
  snapshot.count = running;
  return snapshot;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(start * std::pow(factor, i));
  return bounds;
}

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help) {
  std::lock_guard lock(mutex_);
  return *counters_.emplace_back(std::make_unique<Family<Counter>>(name, help));
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help) {
  std::lock_guard lock(mutex_);
  return *gauges_.emplace_back(std::make_unique<Family<Gauge>>(name, help));
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> bounds) {
  std::lock_guard lock(mutex_);
  return *histograms_.emplace_back(
      std::make_unique<Family<Histogram>>(name, help, std::move(bounds)));
}

void Registry::OnCollect(std::function<void()> collect) {
  std::lock_guard lock(mutex_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::Serialize() const {
  std::lock_guard lock(mutex_);
  for (const auto& collect : collectors_) collect();
  std::string out;
  for (const auto& family : counters_) {
    Header(out, family->name(), family->help(), "counter");
    family->ForEach([&](const Labels& labels, const Counter& counter) {
      absl::StrAppend(&out, family->name(), FormatLabels(labels), " ", FormatValue(counter.Value()),
                      "\n");
    });
  }
  for (const auto& family : gauges_) {
    Header(out, family->name(), family->help(), "gauge");
    family->ForEach([&](const Labels& labels, const Gauge& gauge) {
      absl::StrAppend(&out, family->name(), FormatLabels(labels), " ", FormatValue(gauge.Value()),
                      "\n");
    });
  }
  for (const auto& family : histograms_) {
    Header(out, family->name(), family->help(), "histogram");
    family->ForEach([&](const Labels& labels, const Histogram& histogram) {
      const Histogram::Snapshot s = histogram.Read();
      for (size_t i = 0; i < s.bounds.size(); ++i) {
        absl::StrAppend(&out, family->name(), "_bucket",
                        FormatLabels(labels, "le", FormatValue(s.bounds[i])), " ", s.cumulative[i],
                        "\n");
      }
      absl::StrAppend(&out, family->name(), "_bucket", FormatLabels(labels, "le", "+Inf"), " ",
                      s.count, "\n", family->name(), "_sum", FormatLabels(labels), " ",
                      FormatValue(s.sum), "\n", family->name(), "_count", FormatLabels(labels), " ",
                      s.count, "\n");
    });
  }
  return out;
}

}  // namespace attnserve::metrics
