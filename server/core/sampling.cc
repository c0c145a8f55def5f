#include "server/core/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace attnserve::server {

float LogSumExp(const float* x, int64_t n) {
  const float max = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - max));
  return max + static_cast<float>(std::log(sum));
}

int64_t Sample(const float* logits, int64_t vocab, const GenerateOptions& options,
               std::mt19937_64& rng) {
  if (options.temperature <= 0.0f) return std::max_element(logits, logits + vocab) - logits;
  // Weights relative to the top logit before dividing, so that a tiny temperature gives weights
  // of 1 and 0, not inf - inf.
  const float top = *std::max_element(logits, logits + vocab);
  const double inverse = 1.0 / static_cast<double>(options.temperature);
  const auto weight = [&](int64_t id) {
    return std::exp((static_cast<double>(logits[id]) - top) * inverse);
  };
  const bool nucleus = options.top_p > 0.0f && options.top_p < 1.0f;
  const int64_t keep = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
  if (keep == vocab && !nucleus) {
    // Every token by its weight: one pass, no sort (a sort of the whole vocabulary cost more
    // than a small model's decoding step).
    thread_local std::vector<double> cumulative;
    cumulative.resize(static_cast<size_t>(vocab));
    double total = 0.0;
    for (int64_t id = 0; id < vocab; ++id) cumulative[id] = total += weight(id);
    const double target = std::uniform_real_distribution<double>(0.0, total)(rng);
    const int64_t drawn =
        std::upper_bound(cumulative.begin(), cumulative.end(), target) - cumulative.begin();
    return std::min(drawn, vocab - 1);
  }
  // The top_k most likely (the whole vocabulary without top_k), then, for top_p, as many of
  // them in order as hold top_p of their weight: sorted a few at a time, since the nucleus is
  // usually small.
  const auto more_likely = [&](int64_t a, int64_t b) { return logits[a] > logits[b]; };
  thread_local std::vector<int64_t> ids;
  ids.resize(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  if (keep < vocab) std::nth_element(ids.begin(), ids.begin() + keep, ids.end(), more_likely);
  int64_t kept = keep;
  if (nucleus) {
    double total = 0.0;
    for (int64_t i = 0; i < keep; ++i) total += weight(ids[i]);
    for (int64_t sorted = std::min<int64_t>(keep, 64);; sorted = std::min(keep, sorted * 8)) {
      std::partial_sort(ids.begin(), ids.begin() + sorted, ids.begin() + keep, more_likely);
      double cumulative = 0.0;
      int64_t cut = 0;
      while (cut < sorted && cumulative < options.top_p * total) cumulative += weight(ids[cut++]);
      if (cumulative >= options.top_p * total || sorted == keep) {
        kept = std::max<int64_t>(cut, 1);
        break;
      }
    }
  }
  std::vector<double> weights(static_cast<size_t>(kept));
  for (int64_t i = 0; i < kept; ++i) weights[i] = weight(ids[i]);
  std::discrete_distribution<int64_t> draw(weights.begin(), weights.end());
  return ids[draw(rng)];
}

}  // namespace attnserve::server
