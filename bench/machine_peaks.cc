// The two ceilings the comparison suite measures the engine against, in the same run:
//   sgemm_gflops   one large matmul (2048 x 2048 x 2048) through the engine's oneDNN path
//   read_gbs       streaming reads of a 1 GiB buffer, far beyond the caches, on every thread
// Prints {"sgemm_gflops": ..., "read_gbs": ...}: the best of 10 runs after warm-up, since a
// ceiling is what the machine can do, and on a shared machine a median mixes in the neighbours.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "engine/kernels/vector_ops.h"
#include "engine/matmul.h"
#include "engine/parallel.h"

namespace attnserve {
namespace {

template <typename Fn>
double BestSeconds(Fn fn) {
  for (int i = 0; i < 2; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < 10; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return *std::min_element(times.begin(), times.end());
}

double SgemmGflops() {
  constexpr int64_t n = 2048;
  Tensor a({n, n}), b({n, n}), c({n, n});
  a.Fill(0.5f);
  b.Fill(0.25f);
  const double seconds = BestSeconds([&] {
    if (!Linear(a, b, Tensor(), c).ok()) std::abort();
  });
  return 2.0 * n * n * n / seconds * 1e-9;
}

// Sums `count` floats with four independent accumulators, so the loads, not the adds, bound it.
float Sum(const float* data, int64_t count) {
#ifdef ATTNSERVE_AVX2
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t i = 0; i + 32 <= count; i += 32) {
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_load_ps(data + i + 8 * r));
  }
  return vec::HorizontalSum(
      _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
#else
  float total = 0.0f;
  for (int64_t i = 0; i < count; ++i) total += data[i];
  return total;
#endif
}

double ReadGigabytesPerSecond() {
  constexpr int64_t kFloats = int64_t{1} << 28;  // 1 GiB
  constexpr int64_t kChunks = 64;
  Tensor buffer({kFloats});
  // On huge pages, as the engine's packed weights are: with 4 KB pages the TLB misses, not the
  // memory, set the pace (33 against 50+ GB/s measured).
  constexpr uintptr_t kHugePage = 2 << 20;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(buffer.data());
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  madvise(reinterpret_cast<void*>(aligned), begin + kFloats * sizeof(float) - aligned,
          MADV_HUGEPAGE);
  buffer.Fill(1.0f);
  std::vector<float> sums(kChunks);
  const double seconds = BestSeconds([&] {
    ParallelFor(kChunks, [&](int64_t chunk) {
      sums[chunk] = Sum(buffer.data() + chunk * (kFloats / kChunks), kFloats / kChunks);
    });
  });
  float total = 0.0f;
  for (float s : sums) total += s;
  if (total <= 0.0f) std::abort();  // keeps the reads from being optimized away
  return kFloats * sizeof(float) / seconds * 1e-9;
}

}  // namespace
}  // namespace attnserve

int main() {
  const double gflops = attnserve::SgemmGflops();
  const double gbs = attnserve::ReadGigabytesPerSecond();
  std::printf("{\"sgemm_gflops\": %.1f, \"read_gbs\": %.2f}\n", gflops, gbs);
  return 0;
}
