// ALiBi (Press et al. 2022): per-head slopes of the linear distance penalty added to scores.
#pragma once

#include <vector>

namespace attnserve {

// For n a power of two: 2^(-8i/n), i = 1..n. Otherwise the slopes of the largest power of two
// m < n, followed by every other slope of 2m until there are n, as the paper prescribes.
std::vector<float> AlibiSlopes(int num_heads);

}  // namespace attnserve
