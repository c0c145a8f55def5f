// A small Prometheus client: counters, gauges and histograms in labelled families, rendered in
// the text exposition format 0.0.4. Shaped like prometheus-cpp (Registry, Family, Add(labels))
// so switching to it later is mechanical; Debian bookworm does not package it.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace attnserve::metrics {

using Labels = std::map<std::string, std::string>;

class Counter {
 public:
  void Increment(double amount = 1.0) { value_.fetch_add(amount, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double amount = 1.0) { value_.fetch_add(amount, std::memory_order_relaxed); }
  void Decrement(double amount = 1.0) { value_.fetch_sub(amount, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mutex_;      // guards what follows
  std::vector<uint64_t> counts_;  // per bucket, last is +Inf
  double sum_ = 0.0;
};

// Bucket bounds a, a·f, a·f², ... (count of them).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

enum class MetricType { kCounter, kGauge, kHistogram };

template <typename Metric>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<double> bounds = {})
      : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(bounds)) {}

  // The metric with these labels, created on first use; the reference stays valid.
  Metric& Add(const Labels& labels) {
    std::lock_guard lock(mutex_);
    auto& slot = metrics_[labels];
    if (!slot) {
      if constexpr (std::is_same_v<Metric, Histogram>) {
        slot = std::make_unique<Metric>(bounds_);
      } else {
        slot = std::make_unique<Metric>();
      }
    }
    return *slot;
  }

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  template <typename Visit>
  void ForEach(Visit visit) const {
    std::lock_guard lock(mutex_);
    for (const auto& [labels, metric] : metrics_) visit(labels, *metric);
  }

 private:
  const std::string name_, help_;
  const std::vector<double> bounds_;
  mutable std::mutex mutex_;  // guards metrics_
  std::map<Labels, std::unique_ptr<Metric>> metrics_;
};

class Registry {
 public:
  Family<Counter>& AddCounter(const std::string& name, const std::string& help);
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help);
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<double> bounds);
  // Runs before every Serialize, to refresh gauges that are read rather than pushed.
  void OnCollect(std::function<void()> collect);

  // The text exposition format 0.0.4.
  std::string Serialize() const;

 private:
  mutable std::mutex mutex_;  // guards what follows
  std::vector<std::unique_ptr<Family<Counter>>> counters_;
  std::vector<std::unique_ptr<Family<Gauge>>> gauges_;
  std::vector<std::unique_ptr<Family<Histogram>>> histograms_;
  std::vector<std::function<void()>> collectors_;
};

}  // namespace attnserve::metrics
