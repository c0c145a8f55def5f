#include "engine/kernels/few_rows_linear.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "engine/kernels/activations.h"
#include "engine/kernels/int4_panel_products.h"
#include "engine/kernels/int8_panel_products.h"
#include "engine/kernels/vector_ops.h"
#include "engine/parallel.h"

namespace attnserve {
namespace {

constexpr int64_t kBlock = PackedWeight::kPanelWidth;  // output columns per work item

// out[r] = Σ_k x_r[k] · w[k] for kRows rows of x against one weight row, which is read front to
// back: one sequential stream per thread is what the hardware prefetcher follows best (reading
// four rows at once measured 22 instead of 29 GB/s per thread at K = 768). kUnroll independent
// accumulators per row hide the FMA latency.
template <int kRows>
void RowDots(const float* const x[kRows], const float* w, int64_t k, float out[kRows]) {
  int64_t i = 0;
#ifdef ATTNSERVE_AVX2
  constexpr int kUnroll = kRows <= 2 ? 4 : 2;
  __m256 acc[kRows][kUnroll];
  for (int r = 0; r < kRows; ++r) {
    for (int u = 0; u < kUnroll; ++u) acc[r][u] = _mm256_setzero_ps();
  }
  for (; i + 8 * kUnroll <= k; i += 8 * kUnroll) {
    __m256 wv[kUnroll];
    for (int u = 0; u < kUnroll; ++u) wv[u] = _mm256_loadu_ps(w + i + 8 * u);
    for (int r = 0; r < kRows; ++r) {
      for (int u = 0; u < kUnroll; ++u) {
        acc[r][u] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r] + i + 8 * u), wv[u], acc[r][u]);
      }
    }
  }
  for (; i + 8 <= k; i += 8) {
    const __m256 wv = _mm256_loadu_ps(w + i);
    for (int r = 0; r < kRows; ++r) {
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r] + i), wv, acc[r][0]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int u = 1; u < kUnroll; ++u) acc[r][0] = _mm256_add_ps(acc[r][0], acc[r][u]);
    out[r] = vec::HorizontalSum(acc[r][0]);
  }
#else
  for (int r = 0; r < kRows; ++r) out[r] = 0.0f;
#endif
  for (; i < k; ++i) {
    for (int r = 0; r < kRows; ++r) out[r] += x[r][i] * w[i];
  }
}

// Columns [begin, end) of every row into block[r][0, end - begin).
template <int kRows>
void BlockProducts(const Tensor& x, const Tensor& weight, int64_t begin, int64_t end,
                   float block[kFewRowsMax][kBlock]) {
  const float* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = x.row(r);
  float out[kRows];
  for (int64_t c = begin; c < end; ++c) {
    RowDots<kRows>(rows, weight.row(c), x.dim(1), out);
    for (int r = 0; r < kRows; ++r) block[r][c - begin] = out[r];
  }
}

// block[r][0, end - begin) + bias, activated, into (or added to) columns [begin, end) of y.
// Rows [first, first + m) of y, columns [begin, end), from block's rows [0, m).
void StoreBlock(float block[kFewRowsMax][kBlock], int64_t m, int64_t begin, int64_t end,
                const Tensor& bias, Tensor& y, MatmulEpilogue epilogue, int64_t first = 0) {
  for (int64_t r = 0; r < m; ++r) {
    float* values = block[r];
    if (!bias.empty()) vec::Axpy(1.0f, bias.data() + begin, values, end - begin);
    ActivateInPlace(epilogue.activation, values, end - begin);
    float* out = y.row(first + r) + begin;
    if (epilogue.accumulate) {
      vec::Axpy(1.0f, values, out, end - begin);
    } else {
      std::copy(values, values + (end - begin), out);
    }
  }
}

// All 64 columns of panel j for kRows rows of x into block[r][0, 64). The panel is read in
// slices of kSliceRows rows (16 KB): the first column group brings a slice from memory, the
// others find it in L1. Accumulators: kRows x kVectors vectors of 8 columns, at most 8.
template <int kRows>
void PanelProducts(const Tensor& x, const PackedWeight& weight, int64_t j,
                   float block[kFewRowsMax][kBlock]) {
  constexpr int64_t kSliceRows = 64;
  const float* panel = weight.panel(j);
  const int64_t k = weight.k();
  const float* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = x.row(r);
  for (int r = 0; r < kRows; ++r) std::fill(block[r], block[r] + kBlock, 0.0f);
#ifdef ATTNSERVE_AVX2
  constexpr int kVectors = kRows == 1 ? 8 : kRows == 2 ? 4 : 2;
  for (int64_t slice = 0; slice < k; slice += kSliceRows) {
    const int64_t slice_end = std::min(k, slice + kSliceRows);
    for (int group = 0; group < 8 / kVectors; ++group) {
      const int64_t column = group * kVectors * 8;
      __m256 acc[kRows][kVectors];
      for (int r = 0; r < kRows; ++r) {
        for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm256_loadu_ps(block[r] + column + 8 * v);
      }
      const float* w = panel + slice * kBlock + column;
      for (int64_t i = slice; i < slice_end; ++i, w += kBlock) {
        __m256 wv[kVectors];
        for (int v = 0; v < kVectors; ++v) wv[v] = _mm256_load_ps(w + 8 * v);
        for (int r = 0; r < kRows; ++r) {
          const __m256 xv = _mm256_broadcast_ss(rows[r] + i);
          for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm256_fmadd_ps(xv, wv[v], acc[r][v]);
        }
      }
      for (int r = 0; r < kRows; ++r) {
        for (int v = 0; v < kVectors; ++v) _mm256_storeu_ps(block[r] + column + 8 * v, acc[r][v]);
      }
    }
  }
#else
  for (int64_t i = 0; i < k; ++i) {
    const float* w = panel + i * kBlock;
    for (int r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kBlock; ++c) block[r][c] += rows[r][i] * w[c];
    }
  }
#endif
}

// body.operator()<m>() for 1 <= m <= kFewRowsMax: the kernels are unrolled per row count.
template <typename Body>
void WithRowCount(int64_t m, const Body& body) {
  switch (m) {
    case 1:
      return body.template operator()<1>();
    case 2:
      return body.template operator()<2>();
    case 3:
      return body.template operator()<3>();
    default:
      return body.template operator()<4>();
  }
}

}  // namespace

void FewRowsLinear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y,
                   MatmulEpilogue epilogue) {
  const int64_t n = weight.dim(0);
  ParallelFor((n + kBlock - 1) / kBlock, [&](int64_t index) {
    const int64_t begin = index * kBlock, end = std::min(n, begin + kBlock);
    float block[kFewRowsMax][kBlock];
    WithRowCount(x.dim(0),
                 [&]<int kRows>() { BlockProducts<kRows>(x, weight, begin, end, block); });
    StoreBlock(block, x.dim(0), begin, end, bias, y, epilogue);
  });
}

void FewRowsLinear(const Tensor& x, const PackedWeight& weight, const Tensor& bias, Tensor& y,
                   MatmulEpilogue epilogue) {
  ParallelFor(weight.panels(), [&](int64_t j) {
    const int64_t begin = j * kBlock, end = std::min(weight.n(), begin + kBlock);
    float block[kFewRowsMax][kBlock];
    WithRowCount(x.dim(0), [&]<int kRows>() { PanelProducts<kRows>(x, weight, j, block); });
    StoreBlock(block, x.dim(0), begin, end, bias, y, epilogue);
  });
}

bool UsesInt8Activations(const QuantizedWeight& weight, KernelIsa isa) {
  if (weight.bits() == 4) return true;
  return isa == KernelIsa::kAvx512Vnni && weight.int8_activations() &&
         weight.k() % kInt8ActivationBlock == 0 &&
         (weight.group_size() % kInt8ActivationBlock == 0 ||
          weight.group_size() == kInt8ActivationBlock / 2);
}

int64_t FewRowsMax(const QuantizedWeight& weight, KernelIsa isa) {
  return UsesInt8Activations(weight, isa) ? kFewRowsMaxInt8Activations : kFewRowsMaxInt8;
}

namespace {

// Rows per work item when many rows meet a weight (prefill without AMX): each item brings a panel
// (20 KB in int4 at 576 inputs) into the core's cache once for this many rows, and enough items
// remain to keep both threads busy when a layer has few panels (9 for 576 outputs).
constexpr int64_t kRowsPerItem = 64;

// x's rows quantized to int8 per block of kInt8ActivationBlock, into the calling thread's buffers,
// which the panels' threads reach through plain pointers (they must not look up thread_locals of
// their own).
const Int8Row* QuantizeRows(const Tensor& x, KernelIsa isa) {
  thread_local std::vector<int8_t> values;
  thread_local std::vector<float> scales;
  thread_local std::vector<int32_t> offsets;
  thread_local std::vector<Int8Row> rows;
  const int64_t m = x.dim(0), k = x.dim(1), blocks = k / kInt8ActivationBlock;
  values.resize(m * k);
  scales.resize(m * blocks);
  offsets.resize(m * blocks);
  rows.resize(m);
  const auto quantize = isa == KernelIsa::kAvx512Vnni ? &QuantizeRowVnni : &QuantizeRowAvx2;
  int8_t* v = values.data();
  float* s = scales.data();
  int32_t* o = offsets.data();
  Int8Row* out = rows.data();
  ParallelFor(
      m,
      [&](int64_t r) {
        out[r] = {v + r * k, s + r * blocks, o + r * blocks};
        quantize(x.row(r), k, v + r * k, s + r * blocks, o + r * blocks);
      },
      Schedule::kStatic, m * k >= 1 << 15);
  return out;
}

}  // namespace

void FewRowsLinear(const Tensor& x, const QuantizedWeight& weight, const Tensor& bias, Tensor& y,
                   MatmulEpilogue epilogue, KernelIsa isa) {
  static_assert(kInt8PanelWidth == kBlock && kInt8PanelMaxRows == kFewRowsMax);
  const int64_t rows = x.dim(0), k = weight.k();
  assert(rows <= FewRowsMax(weight, isa) || UsesInt8Activations(weight, isa));
  // A work item is a panel and up to kRowsPerItem rows, four at a time: the first four bring the
  // panel from memory, the others find it in the cache (a panel of 576 inputs is 36 KB in int8,
  // 20 KB in int4).
  const int64_t row_blocks = (rows + kRowsPerItem - 1) / kRowsPerItem;
  const auto for_each_panel = [&](const auto& products) {
    ParallelFor(weight.panels() * row_blocks, [&](int64_t item) {
      const int64_t j = item / row_blocks, row_block = item % row_blocks;
      const int64_t begin = j * kBlock, end = std::min(weight.n(), begin + kBlock);
      const int64_t last = std::min(rows, (row_block + 1) * kRowsPerItem);
      alignas(64) float block[kFewRowsMax][kBlock];
      for (int64_t first = row_block * kRowsPerItem; first < last; first += kFewRowsMax) {
        const int count = static_cast<int>(std::min(kFewRowsMax, last - first));
        products(j, first, count, block);
        StoreBlock(block, count, begin, end, bias, y, epilogue, first);
      }
    });
  };
  if (UsesInt8Activations(weight, isa)) {
    const Int8Row* quantized = QuantizeRows(x, isa);
    if (weight.bits() == 4) {
      const auto products =
          isa == KernelIsa::kAvx512Vnni ? &Int4PanelProductsVnni : &Int4PanelProductsAvx2;
      for_each_panel([&](int64_t j, int64_t first, int count, float block[kFewRowsMax][kBlock]) {
        products(quantized + first, count, weight.int4_panel(j), weight.int4_scales(j), k, block);
      });
    } else {
      for_each_panel([&](int64_t j, int64_t first, int count, float block[kFewRowsMax][kBlock]) {
        Int8PanelProductsVnni(quantized + first, count, weight.panel(j), weight.panel_scales(j), k,
                              weight.group_size(), block);
      });
    }
    return;
  }
  const auto products = isa == KernelIsa::kAvx2 ? &Int8PanelProductsAvx2 : &Int8PanelProductsAvx512;
  std::vector<const float*> x_rows(rows);
  for (int64_t r = 0; r < rows; ++r) x_rows[r] = x.row(r);
  for_each_panel([&](int64_t j, int64_t first, int count, float block[kFewRowsMax][kBlock]) {
    products(x_rows.data() + first, count, weight.panel(j), weight.panel_scales(j), k,
             weight.group_size(), block);
  });
}

}  // namespace attnserve
