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
  std::vector<int64_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t keep = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  ids.resize(keep);
  std::vector<double> weights(keep);
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    // Relative to the top logit before dividing, so a tiny temperature gives weights of 1 and
    // 0, not inf - inf.
    weights[i] = std::exp((static_cast<double>(logits[ids[i]]) - logits[ids[0]]) /
                          static_cast<double>(options.temperature));
    total += weights[i];
  }
  if (options.top_p > 0.0f && options.top_p < 1.0f) {
    double cumulative = 0.0;
    int64_t cut = 0;
    while (cut < keep && cumulative < options.top_p * total) cumulative += weights[cut++];
    weights.resize(std::max<int64_t>(cut, 1));
  }
  std::discrete_distribution<int64_t> draw(weights.begin(), weights.end());
  return ids[draw(rng)];
}

}  // namespace attnserve::server
