#include "engine/kernels/alibi.h"

#include <cmath>

namespace attnserve {
namespace {

std::vector<double> PowerOfTwoSlopes(int n) {
  std::vector<double> slopes(n);
  for (int i = 0; i < n; ++i) slopes[i] = std::pow(2.0, -8.0 * (i + 1) / n);
  return slopes;
}

}  // namespace

std::vector<float> AlibiSlopes(int num_heads) {
  int power = 1;
  while (power * 2 <= num_heads) power *= 2;
  std::vector<double> slopes = PowerOfTwoSlopes(power);
  if (power < num_heads) {
    std::vector<double> finer = PowerOfTwoSlopes(2 * power);
    for (int i = 0; static_cast<int>(slopes.size()) < num_heads; i += 2) slopes.push_back(finer[i]);
  }
  return std::vector<float>(slopes.begin(), slopes.end());
}

}  // namespace attnserve
