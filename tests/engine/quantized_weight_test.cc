#include "engine/quantized_weight.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "engine/bf16.h"
#include "engine/f16.h"
#include "engine/kernels/embedding.h"
#include "engine/kernels/few_rows_linear.h"
#include "engine/kernels/int4_panel_products.h"
#include "engine/kernels/int8_panel_products.h"
#include "engine/matmul.h"
#include "engine/weight_grid.h"
#include "tests/tensor_compare.h"

namespace attnserve {
namespace {

using ::attnserve::testing::AllClose;

Tensor Random(Shape shape, uint32_t seed) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < t.size(); ++i) t.data()[i] = normal(rng);
  return t;
}

// The weight as the tiles dequantize it, in float: value · scale (+ minimum, one fused rounding).
float DequantizedInFloat(const QuantizedWeight& q, int64_t n, int64_t i) {
  const float value = static_cast<float>(q.value(n, i));
  return q.bits() == 4 ? std::fma(value, q.scale(n, i), q.minimum(n, i)) : value * q.scale(n, i);
}

// y = act(x · (values · scales + minimums)ᵀ + b) (+ y0) in double, from the quantized weight's
// own values, scales and minimums: what the kernels must compute, whatever the quantization cost.
// bf16: with x and each weight (dequantized in float) rounded to bfloat16 first, as the bf16 tiles
// are.
Tensor Reference(const Tensor& x, const QuantizedWeight& q, const Tensor& b, const Tensor& y0,
                 Activation activation, bool bf16 = false) {
  const auto operand = [bf16](float value) {
    return bf16 ? double(FromBf16(ToBf16(value))) : double(value);
  };
  // The weight dequantized once (the kernels' tests are the suite's slowest under ASan).
  const int64_t k = q.k();
  std::vector<double> weights(q.n() * k), operands(k);
  for (int64_t n = 0; n < q.n(); ++n) {
    for (int64_t i = 0; i < k; ++i) {
      weights[n * k + i] = bf16 ? operand(DequantizedInFloat(q, n, i))
                                : q.value(n, i) * double(q.scale(n, i)) + double(q.minimum(n, i));
    }
  }
  Tensor y({x.dim(0), q.n()});
  for (int64_t r = 0; r < x.dim(0); ++r) {
    for (int64_t i = 0; i < k; ++i) operands[i] = operand(x.row(r)[i]);
    for (int64_t n = 0; n < q.n(); ++n) {
      double sum = b.empty() ? 0.0 : b.data()[n];
      for (int64_t i = 0; i < k; ++i) sum += operands[i] * weights[n * k + i];
      double value = sum;
      if (activation == Activation::kRelu) value = std::max(value, 0.0);
      if (activation == Activation::kGeluErf)
        value = 0.5 * value * (1.0 + std::erf(value / M_SQRT2));
      if (activation == Activation::kSilu) value = value / (1.0 + std::exp(-value));
      y.row(r)[n] = static_cast<float>(value + (y0.empty() ? 0.0 : y0.row(r)[n]));
    }
  }
  return y;
}

// The int8 tile formats this CPU runs: K-major float everywhere, packed float where oneDNN
// packs, bf16 where BestInt8TileFormat() chose it.
std::vector<Int8TileFormat> TileFormatsOfThisCpu() {
  std::vector<Int8TileFormat> formats = {Int8TileFormat::kFloatKMajor};
  if (PackedWeight::PackingIsFaster()) formats.push_back(Int8TileFormat::kFloatPacked);
  if (BestInt8TileFormat() == Int8TileFormat::kBf16Packed) {
    formats.push_back(Int8TileFormat::kBf16Packed);
  }
  return formats;
}

std::vector<KernelIsa> IsasOfThisCpu() {
  std::vector<KernelIsa> isas = {KernelIsa::kAvx2};
  if (BestKernelIsa() >= KernelIsa::kAvx512) isas.push_back(KernelIsa::kAvx512);
  if (BestKernelIsa() >= KernelIsa::kAvx512Vnni) isas.push_back(KernelIsa::kAvx512Vnni);
  return isas;
}

// x as the VNNI kernel sees it, written out from the definition in int8_panel_products.h: each
// block of 32 quantized to int8 with a scale of its largest magnitude over 127, and multiplied
// back.
Tensor Int8ActivationsOf(const Tensor& x) {
  Tensor out = x.Clone();
  for (int64_t r = 0; r < x.dim(0); ++r) {
    for (int64_t begin = 0; begin < x.dim(1); begin += kInt8ActivationBlock) {
      const float* in = x.row(r) + begin;
      float largest = 0.0f;
      for (int64_t i = 0; i < kInt8ActivationBlock; ++i)
        largest = std::max(largest, std::fabs(in[i]));
      const float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
      for (int64_t i = 0; i < kInt8ActivationBlock; ++i) {
        out.row(r)[begin + i] = std::nearbyint(in[i] * inverse) * (largest / 127.0f);
      }
    }
  }
  return out;
}

// A weight on a grid, as a file stores one (engine/weight_grid.h): random levels of `bits`, and
// scales and minimums (none for 8 bits) that are f16 values, or (f16 false) f16 values times
// integers up to 63 (a GGUF file's Q4_K sub-blocks), which f16 cannot hold. Each element is
// level · scale + minimum, the product exact (at most 23 bits), as in a file.
std::pair<Tensor, WeightGrid> WeightOnGrid(int64_t n, int64_t k, int bits, int64_t group_size,
                                           bool f16, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(0.5f, 1.0f);
  const auto value = [&](float base) {
    const float half = FromF16(ToF16(base));
    return f16 ? half : half * static_cast<float>(1 + rng() % (bits == 4 ? 63 : 15));
  };
  WeightGrid grid;
  grid.bits = bits;
  grid.group_size = group_size;
  grid.type = "test";
  grid.scales = Tensor({n, k / group_size});
  if (bits == 4) grid.minimums = Tensor({n, k / group_size});
  for (int64_t i = 0; i < grid.scales.size(); ++i) {
    grid.scales.data()[i] = value(0.01f * uniform(rng));
    if (bits == 4) grid.minimums.data()[i] = -value(0.1f * uniform(rng));
  }
  Tensor w({n, k});
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t g = i / group_size;
      const float level =
          bits == 4 ? static_cast<float>(rng() % 16) : static_cast<float>(rng() % 256) - 128.0f;
      w.row(r)[i] = level * grid.scales.row(r)[g] + (bits == 4 ? grid.minimums.row(r)[g] : 0.0f);
    }
  }
  return {std::move(w), std::move(grid)};
}

// An int4 weight whose scales and minimums f16 cannot hold (a GGUF file's Q4_K sub-blocks).
QuantizedWeight Int4WithFloatScales(int64_t n, int64_t k, uint32_t seed) {
  const auto [w, grid] = WeightOnGrid(n, k, 4, kInt4Group, /*f16=*/false, seed);
  absl::StatusOr<QuantizedWeight> q = QuantizedWeight::OnGrid(w, grid, true);
  EXPECT_TRUE(q.ok()) << q.status();
  EXPECT_NE(q->int4_scales(0).floats, nullptr);
  return *q;
}

// A weight on a file's grid is kept exactly: every element dequantizes to its own value bit for
// bit, int4 keeps f16 scales where f16 holds them all and floats otherwise (a byte more per group
// and column), int8 keeps the grid's group size (16: Q3_K and Q6_K's sub-blocks).
TEST(QuantizedWeightTest, OnGridKeepsTheValuesExactly) {
  struct Case {
    int bits;
    int64_t group_size;
    bool f16;
  };
  for (const Case& c :
       {Case{4, 32, true}, Case{4, 32, false}, Case{8, 32, true}, Case{8, 16, false}}) {
    const int64_t n = 70, k = 256;
    const auto [w, grid] = WeightOnGrid(n, k, c.bits, c.group_size, c.f16, 5);
    absl::StatusOr<QuantizedWeight> q = QuantizedWeight::OnGrid(w, grid, true);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(q->bits(), c.bits);
    EXPECT_EQ(q->group_size(), c.group_size);
    const Tensor back = q->Dequantize();
    for (int64_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(back.data()[i], w.data()[i]) << c.bits << " bits, element " << i;
    }
    if (c.bits == 4) {
      EXPECT_EQ(q->int4_scales(1).halves != nullptr, c.f16);
      const int64_t scale_bytes = c.f16 ? 2 : 4;
      EXPECT_EQ(q->bytes(), 2 * 64 * (k / 2 + k / 32 * 2 * scale_bytes));
    }
    // A value off the grid (half a step away) is refused, naming the grid.
    Tensor off = w.Clone();
    off.row(69)[200] += 0.5f * grid.scales.row(69)[200 / c.group_size];
    const absl::Status refused = QuantizedWeight::OnGrid(off, grid, true).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(), "test grid")) << refused;
  }
  // A grid that does not fit the weight is an error, not a crash.
  const auto [w, grid] = WeightOnGrid(64, 64, 4, 32, true, 6);
  EXPECT_EQ(QuantizedWeight::OnGrid(w.Slice(1, 0, 32).Clone(), grid, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Each group's largest magnitude becomes ±127; every value is the nearest level of its group's
// scale; a group of zeros has zero values and scale; a partial last group and a partial last
// panel are quantized like the others.
TEST(QuantizedWeightTest, QuantizesEachGroupToItsNearestLevels) {
  for (int64_t group_size : {0, 16, 32}) {
    Tensor w = Random({150, 100}, 1);
    for (int64_t i = 0; i < 100; ++i) w.row(7)[i] = 0.0f;  // a row of zeros
    w.row(9)[3] = FLT_MAX;                                 // the largest values
    w.row(9)[40] = -FLT_MAX;
    const QuantizedWeight q = QuantizedWeight::Quantize(w, group_size);
    const int64_t group = group_size == 0 ? 100 : group_size;
    ASSERT_EQ(q.groups(), (100 + group - 1) / group);
    ASSERT_EQ(q.panels(), 3);
    for (int64_t n = 0; n < 150; ++n) {
      for (int64_t g = 0; g < q.groups(); ++g) {
        float largest = 0.0f;
        for (int64_t i = g * group; i < std::min<int64_t>(100, (g + 1) * group); ++i) {
          largest = std::max(largest, std::fabs(w.row(n)[i]));
        }
        ASSERT_EQ(q.scale(n, g * group), largest / 127.0f) << "row " << n << " group " << g;
      }
      for (int64_t i = 0; i < 100; ++i) {
        const float scale = q.scale(n, i), value = w.row(n)[i];
        if (scale == 0.0f) {
          ASSERT_EQ(q.value(n, i), 0);
          continue;
        }
        ASSERT_LE(std::abs(q.value(n, i)), 127);
        ASSERT_LE(std::fabs(value / scale - q.value(n, i)), 0.5f + 1e-4f)
            << "row " << n << " column " << i;
      }
    }
    EXPECT_EQ(q.value(9, 3), 127);
    EXPECT_EQ(q.value(9, 40), -127);
    // The padding columns of the last panel hold zeros.
    for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(q.panel(2)[i * 64 + 150 - 128], 0);
  }
}

TEST(QuantizedWeightTest, DequantizesToValuesTimesScales) {
  const Tensor w = Random({70, 45}, 2);
  const QuantizedWeight q = QuantizedWeight::Quantize(w, 16);
  const Tensor dequantized = q.Dequantize();
  for (int64_t n = 0; n < 70; ++n) {
    for (int64_t i = 0; i < 45; ++i) {
      ASSERT_EQ(dequantized.row(n)[i], q.value(n, i) * q.scale(n, i));
      // Within half a level of the original.
      ASSERT_LE(std::fabs(dequantized.row(n)[i] - w.row(n)[i]), 0.5f * q.scale(n, i) * 1.0001f);
    }
  }
  const std::vector<int64_t> ids = {69, 0, 7};
  Tensor rows({3, 45});
  ASSERT_TRUE(EmbedTokens(q, ids, rows).ok());
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t i = 0; i < 45; ++i) ASSERT_EQ(rows.row(r)[i], dequantized.row(ids[r])[i]);
  }
  Tensor one_row = rows.Slice(0, 0, 1);
  const absl::Status outside = EmbedTokens(q, std::vector<int64_t>{70}, one_row);
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(outside.message(), "token id 70")) << outside;
}

// Int4: each group of 32 keeps its minimum (rounded to f16) and a scale of (max - minimum) / 15
// (rounded to f16); every value is its nearest level 0-15, within half a step; a group of equal
// values is its minimum with scale 0; the padding columns of the last panel are zero.
TEST(QuantizedWeightTest, Int4QuantizesEachGroupToItsNearestLevels) {
  Tensor w = Random({150, 96}, 1);
  for (int64_t i = 0; i < 96; ++i) w.row(7)[i] = 0.0f;
  std::fill(w.row(8) + 32, w.row(8) + 64, 2.5f);
  w.row(9)[3] = 1000.0f;  // a coarse group
  const QuantizedWeight q = QuantizedWeight::QuantizeInt4(w);
  ASSERT_EQ(q.bits(), 4);
  ASSERT_EQ(q.groups(), 3);
  EXPECT_EQ(q.bytes(), 3 * 64 * (48 + 3 * 4));
  for (int64_t n = 0; n < 150; ++n) {
    for (int64_t g = 0; g < 3; ++g) {
      const float* values = w.row(n) + 32 * g;
      const float low = *std::min_element(values, values + 32);
      const float high = *std::max_element(values, values + 32);
      const float minimum = FromF16(ToF16(low));
      ASSERT_EQ(q.minimum(n, 32 * g), minimum) << n << " " << g;
      ASSERT_EQ(q.scale(n, 32 * g), FromF16(ToF16((high - minimum) / 15.0f))) << n << " " << g;
      const float step = q.scale(n, 32 * g);
      for (int64_t i = 32 * g; i < 32 * g + 32; ++i) {
        const int level = q.value(n, i);
        ASSERT_GE(level, 0);
        ASSERT_LE(level, 15);
        if (step == 0.0f) {
          ASSERT_EQ(level, 0);
          continue;
        }
        const float exact = (w.row(n)[i] - minimum) / step;
        if (exact > 0.0f && exact < 15.0f) {
          ASSERT_LE(std::fabs(exact - level), 0.5f + 1e-4f) << "row " << n << " column " << i;
        }
        ASSERT_LE(std::fabs(DequantizedInFloat(q, n, i) - w.row(n)[i]), 0.52f * step);
      }
    }
  }
  EXPECT_EQ(q.scale(8, 40), 0.0f);
  EXPECT_EQ(q.minimum(8, 40), 2.5f);
  EXPECT_EQ(q.value(9, 3), 15);
  for (int64_t i = 0; i < 96 * 32; ++i) {
    const int64_t byte = i / 1024 * 1024 + i % 1024;
    if (byte % 64 / 4 >= 150 - 128 && (byte % 1024) / 256 >= 1) {
      ASSERT_EQ(q.int4_panel(2)[byte], 0) << byte;  // columns 22-63 of the last panel
    }
  }
}

// Every tile layout and the embedding lookup give level · scale + minimum (one rounding).
TEST(QuantizedWeightTest, Int4DequantizesToLevelTimesScalePlusMinimum) {
  const Tensor w = Random({70, 64}, 2);
  const QuantizedWeight q = QuantizedWeight::QuantizeInt4(w);
  const Tensor dequantized = q.Dequantize();
  for (int64_t n = 0; n < 70; ++n) {
    for (int64_t i = 0; i < 64; ++i) {
      ASSERT_EQ(dequantized.row(n)[i], DequantizedInFloat(q, n, i)) << n << " " << i;
    }
  }
  std::vector<float> columns(64 * 128), panels(2 * 80 * 64);
  std::vector<uint16_t> panels_bf16(2 * 80 * 64);
  q.DequantizeColumns(0, 2, columns.data(), 128);
  q.DequantizePanels(0, 2, 80, panels.data());
  q.DequantizePanelsBf16(0, 2, 80, panels_bf16.data());
  for (int64_t n = 0; n < 128; ++n) {
    for (int64_t i = 0; i < 80; ++i) {
      const float expected = n < 70 && i < 64 ? dequantized.row(n)[i] : 0.0f;
      const float packed = panels[(n / 64 * 80 + i) * 64 + n % 64];
      const float bf16 = FromBf16(panels_bf16[(n / 64 * 80 + i / 2 * 2) * 64 + n % 64 * 2 + i % 2]);
      ASSERT_EQ(packed, expected) << n << " " << i;
      ASSERT_EQ(bf16, FromBf16(ToBf16(expected))) << n << " " << i;
      if (n < 70 && i < 64) {
        ASSERT_EQ(columns[i * 128 + n], expected) << n << " " << i;
      }
    }
  }
  const std::vector<int64_t> ids = {69, 0};
  Tensor rows({2, 64});
  ASSERT_TRUE(EmbedTokens(q, ids, rows).ok());
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(rows.row(r)[i], dequantized.row(ids[r])[i]);
  }
}

// A weight read in slices of rows quantizes exactly as the whole weight does, int8 and int4,
// whatever the slices' size (rounded to whole panels; the last one partial); an error from a
// slice is returned.
TEST(QuantizedWeightTest, QuantizesSlicesOfRowsAsTheWholeWeight) {
  const Tensor w = Random({300, 96}, 4);
  for (int bits : {8, 4}) {
    const WeightFormat format{.quantized = true, .bits = bits};
    const QuantizedWeight whole = QuantizedWeight::Quantize(w, format);
    for (int64_t slice_rows : {1, 64, 100, 1000}) {
      std::vector<std::pair<int64_t, int64_t>> asked;
      auto sliced = QuantizedWeight::QuantizeSlices(
          300, 96, format,
          [&](int64_t first, int64_t count) -> absl::StatusOr<Tensor> {
            asked.push_back({first, count});
            return w.Slice(0, first, count).Clone();
          },
          slice_rows);
      ASSERT_TRUE(sliced.ok()) << sliced.status();
      EXPECT_EQ(sliced->bits(), bits);
      EXPECT_EQ(asked.back().first + asked.back().second, 300);
      EXPECT_EQ(asked.front().second,
                std::min<int64_t>(300, std::max<int64_t>(64, slice_rows / 64 * 64)));
      EXPECT_TRUE(AllClose(sliced->Dequantize(), whole.Dequantize(), 0.0f, 0.0f))
          << bits << " " << slice_rows;
    }
  }
  const auto failing = QuantizedWeight::QuantizeSlices(
      300, 96, {.quantized = true}, [](int64_t, int64_t) -> absl::StatusOr<Tensor> {
        return absl::DataLossError("a bad slice");
      });
  EXPECT_EQ(failing.status().code(), absl::StatusCode::kDataLoss);
}

// The decoding kernel on each instruction set of this CPU, for 1 row to its most: odd widths
// (K = 43 and 100 end in partial vectors, N = 150 in a partial panel), the tail of a group
// (100 = 3·32 + 4), per-column and per-group scales, rows of zeros and every epilogue. With VNNI,
// K = 1024 and groups of 32 or K take int8 activations, the others the float kernel. Int4 weights
// (group size -1 here) take int8 activations on every instruction set.
TEST(QuantizedLinearTest, FewRowsKernelMatchesFloat64Reference) {
  for (int64_t k : {43, 96, 100, 1024}) {
    // Group size -1: int4; -2: int4 with float scales.
    for (int64_t group_size : {-2, -1, 0, 16, 32}) {
      if (group_size < 0 && k % kInt4Group != 0) continue;
      Tensor w = Random({150, k}, 1);
      for (int64_t i = 0; i < k; ++i) w.row(64)[i] = 0.0f;
      const QuantizedWeight q = group_size == -2   ? Int4WithFloatScales(150, k, 1)
                                : group_size == -1 ? QuantizedWeight::QuantizeInt4(w)
                                                   : QuantizedWeight::Quantize(w, group_size);
      const Tensor b = Random({150}, 2);
      for (KernelIsa isa : IsasOfThisCpu()) {
        std::vector<int64_t> row_counts = {1, 2, 3, 4, 5, 11, FewRowsMax(q, isa)};
        // With int8 activations, any number: 130 rows are three work items of up to 64 rows.
        if (UsesInt8Activations(q, isa)) row_counts.push_back(130);
        for (int64_t m : row_counts) {
          Tensor x = Random({m, k}, 3 + m);
          if (m > 2) std::fill(x.row(2), x.row(2) + k, 0.0f);  // a row of zeros
          const Tensor seen = UsesInt8Activations(q, isa) ? Int8ActivationsOf(x) : x;
          for (Activation activation : {Activation::kNone, Activation::kGeluErf}) {
            for (bool accumulate : {false, true}) {
              const Tensor bias = accumulate ? Tensor() : b;
              Tensor y = Random({m, 150}, 99);
              const Tensor y0 = accumulate ? y.Clone() : Tensor();
              FewRowsLinear(x, q, bias, y, {accumulate, activation}, isa);
              EXPECT_TRUE(AllClose(y, Reference(seen, q, bias, y0, activation), 1e-4f, 1e-4f))
                  << KernelIsaName(isa) << " k=" << k << " group=" << group_size << " m=" << m
                  << " activation=" << static_cast<int>(activation);
            }
          }
        }
      }
    }
  }
}

// Each block of 32 activations: its largest magnitude becomes ±127, the others their nearest level
// (half to even), a block of zeros all zeros with a zero scale; offsets are -128 · Σ values. The
// AVX2 quantizer gives the VNNI one's results bit for bit.
TEST(QuantizedLinearTest, Int8ActivationsAreEachBlocksNearestLevels) {
  Tensor x = Random({1, 128}, 5);
  std::fill(x.data() + 32, x.data() + 64, 0.0f);
  x.data()[64] = -1000.0f;  // an outlier makes the rest of its block coarse
  x.data()[100] = 0.5f * x.data()[101];
  const Tensor expected = Int8ActivationsOf(x);
  using Quantizer = void (*)(const float*, int64_t, int8_t*, float*, int32_t*);
  std::vector<std::pair<const char*, Quantizer>> quantizers = {{"avx2", &QuantizeRowAvx2}};
  if (BestKernelIsa() >= KernelIsa::kAvx512Vnni) quantizers.push_back({"vnni", &QuantizeRowVnni});
  std::vector<int8_t> first_values;
  for (const auto& [name, quantize] : quantizers) {
    std::vector<int8_t> values(128);
    float scales[4];
    int32_t offsets[4];
    quantize(x.data(), 128, values.data(), scales, offsets);
    for (int b = 0; b < 4; ++b) {
      int32_t sum = 0, largest = 0;
      for (int i = 32 * b; i < 32 * b + 32; ++i) {
        ASSERT_FLOAT_EQ(values[i] * scales[b], expected.data()[i]) << name << " " << i;
        sum += values[i];
        largest = std::max<int32_t>(largest, std::abs(values[i]));
      }
      EXPECT_EQ(offsets[b], -128 * sum) << name << " " << b;
      EXPECT_EQ(largest, b == 1 ? 0 : 127) << name << " " << b;
    }
    EXPECT_EQ(scales[1], 0.0f) << name;
    EXPECT_EQ(values[64], -127) << name;
    EXPECT_FLOAT_EQ(scales[2], 1000.0f / 127.0f) << name;
    if (first_values.empty()) first_values = values;
    EXPECT_EQ(values, first_values) << name;
  }
}

// What int8 activations cost on random inputs: against float activations the outputs move by well
// under 1% of their spread (the activations' rounding is 1/254 of each block's largest).
TEST(QuantizedLinearTest, Int8ActivationsStayCloseToFloatActivations) {
  if (BestKernelIsa() < KernelIsa::kAvx512Vnni) GTEST_SKIP() << "this CPU has no AVX512-VNNI";
  const QuantizedWeight q = QuantizedWeight::Quantize(Random({256, 576}, 1), 32);
  const Tensor x = Random({4, 576}, 2);
  Tensor with_int8({4, 256}), with_float({4, 256});
  FewRowsLinear(x, q, Tensor(), with_int8, {}, KernelIsa::kAvx512Vnni);
  FewRowsLinear(x, q, Tensor(), with_float, {}, KernelIsa::kAvx512);
  double error = 0.0, spread = 0.0;
  for (int64_t i = 0; i < with_float.size(); ++i) {
    error += std::pow(with_int8.data()[i] - with_float.data()[i], 2.0);
    spread += std::pow(with_float.data()[i], 2.0);
  }
  EXPECT_LT(std::sqrt(error / spread), 0.01);
  EXPECT_GT(std::sqrt(error / spread), 0.0);  // it is a different computation
}

// More rows go through dequantized tiles and oneDNN, in each tile format: 2,100 columns fill
// several tiles, the last one partial, and the output columns land in their place. K = 1,023 is
// odd and not a multiple of 16 (the packed tiles' padding); K = 200 pads to 13 blocks of 16, past
// which oneDNN's bf16 kernel reads.
TEST(QuantizedLinearTest, ManyRowsMatchFloat64Reference) {
  for (Int8TileFormat format : TileFormatsOfThisCpu()) {
    const bool bf16 = format == Int8TileFormat::kBf16Packed;
    // Group size -1: int4 (K = 224 pads to 14 blocks of 16); -2: int4 with float scales.
    for (const auto& [k, group_size] :
         {std::pair<int64_t, int64_t>{1023, 0}, {1023, 32}, {200, 32}, {224, -1}, {224, -2}}) {
      const int64_t n = 2100;
      const QuantizedWeight q = group_size == -2 ? Int4WithFloatScales(n, k, 1)
                                : group_size == -1
                                    ? QuantizedWeight::QuantizeInt4(Random({n, k}, 1))
                                    : QuantizedWeight::Quantize(Random({n, k}, 1), group_size);
      const Tensor bias = Random({n}, 2);
      for (int64_t m : {5, 37}) {
        const Tensor x = Random({m, k}, 3 + m);
        // The residual sum, or an activation (oneDNN 2.6 runs the two together on ref:any only).
        const bool accumulate = m == 5;
        const Activation activation = accumulate ? Activation::kNone : Activation::kSilu;
        Tensor y = Random({m, n}, 99);
        const Tensor y0 = accumulate ? y.Clone() : Tensor();
        QuantizedMatmul(x, q, bias, y, {accumulate, activation}, format);
        EXPECT_TRUE(AllClose(y, Reference(x, q, bias, y0, activation, bf16), 1e-4f, 1e-4f))
            << Int8TileFormatName(format) << " m=" << m << " group=" << group_size;
      }
    }
  }
}

// Linear sends up to FewRowsMax rows of an int8 or int4 weight through the few-rows kernel, and
// more through the tiles unless the weight takes int8 activations and the tiles have no AMX.
TEST(QuantizedLinearTest, LinearTakesTheBestTileFormat) {
  for (const QuantizedWeight& q : {QuantizedWeight::Quantize(Random({300, 200}, 1), 32),
                                   QuantizedWeight::QuantizeInt4(Random({300, 224}, 1))}) {
    const int64_t k = q.k();
    const LinearWeights linear{Tensor(), Random({300}, 2), {}, q};
    const Tensor few = Random({FewRowsMax(q), k}, 4);
    Tensor y_few({few.dim(0), 300}), expected_few({few.dim(0), 300});
    ASSERT_TRUE(Linear(few, linear, y_few).ok());
    FewRowsLinear(few, q, linear.bias, expected_few, {});
    EXPECT_TRUE(AllClose(y_few, expected_few, 0.0f, 0.0f));
    EXPECT_TRUE(FewRowsKernelTakes(q, FewRowsMax(q)));
    const Tensor x = Random({FewRowsMax(q) + 1, k}, 3);
    Tensor y({x.dim(0), 300}), expected({x.dim(0), 300});
    ASSERT_TRUE(Linear(x, linear, y).ok());
    if (FewRowsKernelTakes(q, x.dim(0))) {
      EXPECT_TRUE(UsesInt8Activations(q) && BestKernelIsa() == KernelIsa::kAvx512Vnni);
      FewRowsLinear(x, q, linear.bias, expected, {});
    } else {
      QuantizedMatmul(x, q, linear.bias, expected, {}, BestInt8TileFormat());
    }
    EXPECT_TRUE(AllClose(y, expected, 0.0f, 0.0f));
  }
}

TEST(QuantizedLinearTest, PrepareLinearQuantizesAndDropsTheFloatWeight) {
  const Tensor w = Random({96, 64}, 5);
  const LinearWeights linear = PrepareLinear(w, Tensor(), {.quantized = true, .group_size = 32});
  EXPECT_TRUE(linear.weight.empty());
  EXPECT_TRUE(linear.packed.empty());
  ASSERT_FALSE(linear.quantized.empty());
  EXPECT_EQ(linear.out_features(), 96);
  EXPECT_EQ(linear.in_features(), 64);
  EXPECT_EQ(linear.quantized.group_size(), 32);
  EXPECT_EQ(linear.quantized.bytes(), 2 * 64 * (64 + 2 * 4));
  EXPECT_TRUE(AllClose(linear.PlainWeight(), linear.quantized.Dequantize(), 0.0f, 0.0f));
  Tensor y({2, 96});
  EXPECT_EQ(Linear(Random({2, 63}, 6), linear, y).code(), absl::StatusCode::kInvalidArgument);
  // Int4 where the depth is whole groups of 32, int8 where it is not.
  const WeightFormat int4{.quantized = true, .bits = 4};
  EXPECT_EQ(PrepareLinear(w, Tensor(), int4).quantized.bits(), 4);
  EXPECT_EQ(PrepareLinear(w, Tensor(), int4).quantized.bytes(), 2 * 64 * (32 + 2 * 4));
  EXPECT_EQ(PrepareLinear(Random({96, 48}, 7), Tensor(), int4).quantized.bits(), 8);
}

// Under --weights=auto a file's matrices keep their grids (engine/weight_grid.h): a fused
// projection whose parts share a layout is one weight on their stacked grids; parts of different
// layouts stay parts, each exact, and Linear writes each part's columns of the answer; a part the
// file stores on no grid is quantized again, which the report counts with the difference it made.
TEST(QuantizedLinearTest, PrepareStackedLinearKeepsTheFilesGrids) {
  const int64_t k = 64;
  auto grids = std::make_shared<WeightGrids>();
  const WeightFormat format{.quantized = true, .bits = 4, .grids = grids};
  const auto [q4, q4_grid] = WeightOnGrid(96, k, 4, 32, true, 1);
  const auto [q4k, q4k_grid] = WeightOnGrid(32, k, 4, 32, false, 2);
  const auto [q6k, q6k_grid] = WeightOnGrid(40, k, 8, 16, true, 3);
  const Tensor plain = Random({32, k}, 4);
  grids->Set(q4.data(), q4_grid);
  grids->Set(q4k.data(), q4k_grid);
  grids->Set(q6k.data(), q6k_grid);
  grids->Set(plain.data(), WeightGrid{.bits = 0, .scales = {}, .minimums = {}, .type = "F16"});
  const Tensor bias = Random({96 + 32 + 40}, 5);
  const Tensor biases[] = {bias.Slice(0, 0, 96).Clone(), bias.Slice(0, 96, 32).Clone(),
                           bias.Slice(0, 128, 40).Clone()};

  // One layout (int4): one weight, its values the parts' own.
  const LinearWeights shared = PrepareStackedLinear({&q4, &q4k}, {&biases[0], &biases[1]}, format);
  ASSERT_TRUE(shared.parts.empty());
  EXPECT_EQ(shared.quantized.bits(), 4);
  EXPECT_NE(shared.quantized.int4_scales(0).floats, nullptr);  // Q4_K's scales need floats
  const Tensor shared_plain = shared.PlainWeight();
  for (int64_t i = 0; i < q4.size(); ++i) ASSERT_EQ(shared_plain.data()[i], q4.data()[i]);

  // Three layouts: three parts.
  const LinearWeights mixed =
      PrepareStackedLinear({&q4, &q4k, &q6k}, {&biases[0], &biases[1], &biases[2]}, format);
  ASSERT_EQ(mixed.parts.size(), 3u);
  EXPECT_EQ(mixed.parts[2].quantized.bits(), 8);
  EXPECT_EQ(mixed.parts[2].quantized.group_size(), 16);
  EXPECT_EQ(mixed.out_features(), 168);
  EXPECT_EQ(mixed.in_features(), k);
  const Tensor stacked = mixed.PlainWeight();
  for (int64_t i = 0; i < q6k.size(); ++i) {
    ASSERT_EQ(stacked.data()[128 * k + i], q6k.data()[i]);
  }
  for (int64_t m : {1, 3, 40}) {
    const Tensor x = Random({m, k}, 6);
    Tensor y = Random({m, 168}, 7);
    const Tensor y0 = y.Clone();
    ASSERT_TRUE(Linear(x, mixed, y, {true, Activation::kNone}).ok());
    // Each part as Linear computes it alone: the parts' columns side by side.
    for (int p = 0, column = 0; p < 3; column += mixed.parts[p].out_features(), ++p) {
      Tensor part_y = y0.Slice(1, column, mixed.parts[p].out_features()).Clone();
      ASSERT_TRUE(Linear(x, mixed.parts[p], part_y, {true, Activation::kNone}).ok());
      EXPECT_TRUE(AllClose(y.Slice(1, column, part_y.dim(1)).Clone(), part_y, 0.0f, 0.0f))
          << "m=" << m << " part " << p;
    }
  }
  EXPECT_EQ(grids->report().exact, 4);

  // A part on no grid: that part quantized again, and reported; the other kept as stored.
  const LinearWeights with_float = PrepareStackedLinear({&q4, &plain}, {}, format);
  ASSERT_EQ(with_float.parts.size(), 2u);
  EXPECT_EQ(grids->report().exact, 5);
  EXPECT_EQ(grids->report().requantized.at("F16"), 1);
  EXPECT_GT(grids->report().largest_error, 0.0);
  EXPECT_LT(grids->report().largest_error, 0.1);
  EXPECT_TRUE(absl::StrContains(grids->report().Describe(), "1 quantized again (F16: 1)"))
      << grids->report().Describe();
  // Parts that are all on no grid stay one weight.
  const Tensor plain2 = Random({32, k}, 8);
  grids->Set(plain2.data(), WeightGrid{.bits = 0, .scales = {}, .minimums = {}, .type = "F16"});
  EXPECT_TRUE(PrepareStackedLinear({&plain, &plain2}, {}, format).parts.empty());
  EXPECT_EQ(grids->report().requantized.at("F16"), 2);
}

// The tiles' matmuls at GPT-2-small and SmolLM shapes, with the epilogues the layers use (an
// activation on the way up, the residual sum on the way down), resolve to optimized oneDNN
// kernels, in every tile format.
TEST(QuantizedLinearTest, TileMatmulsAreNeverReferenceKernels) {
  const Activation activation = Activation::kGeluTanh;
  for (Int8TileFormat format : TileFormatsOfThisCpu()) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{2304, 768},
                               {3072, 768},
                               {768, 3072},
                               {3072, 576},
                               {576, 1536}}) {
      const QuantizedWeight q = QuantizedWeight::Quantize(Random({n, k}, 2), 0);
      for (int64_t m : {9, 128}) {
        Tensor y = Tensor::Zeros({m, n});
        const MatmulEpilogue epilogue =
            n > k ? MatmulEpilogue{false, activation} : MatmulEpilogue{true};
        QuantizedMatmul(Random({m, k}, 3), q, Random({n}, 1), y, epilogue, format);
      }
    }
  }
  for (const PrimitiveInfo& info : CreatedMatmulPrimitives()) {
    EXPECT_FALSE(absl::StartsWith(info.implementation, "ref"))
        << info.key << " resolved to " << info.implementation;
  }
}

}  // namespace
}  // namespace attnserve
