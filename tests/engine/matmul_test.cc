#include "engine/matmul.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "engine/blocks/feed_forward.h"
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

float Gelu(float x) { return 0.5f * x * (1.0f + std::erf(x / std::sqrt(2.0f))); }
float GeluTanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(std::sqrt(2.0f / float(M_PI)) * (x + 0.044715f * x * x * x)));
}

// y = act(x Wᵀ + b) (+ y0), in double.
Tensor Reference(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y0,
                 Activation activation) {
  Tensor y({x.dim(0), w.dim(0)});
  for (int64_t i = 0; i < x.dim(0); ++i) {
    for (int64_t j = 0; j < w.dim(0); ++j) {
      double sum = b.empty() ? 0.0 : b.data()[j];
      for (int64_t k = 0; k < x.dim(1); ++k) sum += double(x.row(i)[k]) * w.row(j)[k];
      float value = static_cast<float>(sum);
      if (activation == Activation::kRelu) value = std::max(value, 0.0f);
      if (activation == Activation::kGeluErf) value = Gelu(value);
      if (activation == Activation::kGeluTanh) value = GeluTanh(value);
      if (activation == Activation::kSilu) value = value / (1.0f + std::exp(-value));
      y.row(i)[j] = value + (y0.empty() ? 0.0f : y0.row(i)[j]);
    }
  }
  return y;
}

// Up to kFewRowsMax rows take the engine's own kernel, more take oneDNN: both are checked. 150
// outputs span several of the kernel's column blocks and end in a partial group; K = 43 ends in
// a partial vector.
TEST(LinearTest, MatchesReferenceForEveryEpilogue) {
  const int64_t n = 150, k = 43;
  const Tensor w = Random({n, k}, 1), b = Random({n}, 2);
  for (int64_t m : {1, 2, 3, 4, 5, 64}) {
    const Tensor x = Random({m, k}, 3 + m);
    for (Activation activation : {Activation::kNone, Activation::kRelu, Activation::kGeluErf,
                                  Activation::kGeluTanh, Activation::kSilu}) {
      for (bool with_bias : {false, true}) {
        for (bool accumulate : {false, true}) {
          const Tensor bias = with_bias ? b : Tensor();
          Tensor y = Random({m, n}, 99);
          const Tensor y0 = accumulate ? y.Clone() : Tensor();
          ASSERT_TRUE(Linear(x, w, bias, y, {accumulate, activation}).ok());
          EXPECT_TRUE(AllClose(y, Reference(x, w, bias, y0, activation), 1e-4f, 1e-4f))
              << "m=" << m << " activation=" << static_cast<int>(activation)
              << " bias=" << with_bias << " accumulate=" << accumulate;
        }
      }
    }
  }
}

// Panel j of a packed weight holds columns [64j, 64j + 64) of Wᵀ, K padded to 16 with zeros.
TEST(PackedWeightTest, LaysOutPanelsOfWTransposed) {
  const Tensor w = Random({150, 43}, 1);
  const PackedWeight packed = PackedWeight::Pack(w);
  ASSERT_EQ(packed.panels(), 3);
  ASSERT_EQ(packed.padded_k(), 48);
  for (int64_t j = 0; j < packed.panels(); ++j) {
    for (int64_t r = 0; r < packed.padded_k(); ++r) {
      for (int64_t c = 0; c < PackedWeight::kPanelWidth; ++c) {
        const int64_t column = j * PackedWeight::kPanelWidth + c;
        const float expected = r < 43 && column < 150 ? w.row(column)[r] : 0.0f;
        ASSERT_EQ(packed.panel(j)[r * PackedWeight::kPanelWidth + c], expected)
            << "panel " << j << " row " << r << " column " << c;
      }
    }
  }
  EXPECT_TRUE(AllClose(packed.Unpack(), w, 0.0f, 0.0f));
}

// The packed path: the engine's panel kernel up to kFewRowsMax rows, then oneDNN on chunks of
// fixed row counts (600 = 512 + 64 + 16 + 8, 13 = 8 + 5). On CPUs where packing does not pay,
// oneDNN runs the packed layout on a slow kernel, still exactly. The plain weight is dropped, as
// PrepareLinear drops it.
TEST(LinearTest, MatchesReferenceFromPackedWeights) {
  const int64_t n = 150, k = 43;
  const Tensor w = Random({n, k}, 1), b = Random({n}, 2);
  for (int64_t m : {1, 2, 3, 4, 5, 13, 64, 600}) {
    const Tensor x = Random({m, k}, 3 + m);
    for (Activation activation : {Activation::kNone, Activation::kGeluErf}) {
      for (bool with_bias : {false, true}) {
        for (bool accumulate : {false, true}) {
          const LinearWeights linear{Tensor(), with_bias ? b : Tensor(), PackedWeight::Pack(w), {}};
          Tensor y = Random({m, n}, 99);
          const Tensor y0 = accumulate ? y.Clone() : Tensor();
          ASSERT_TRUE(Linear(x, linear, y, {accumulate, activation}).ok());
          EXPECT_TRUE(AllClose(y, Reference(x, w, linear.bias, y0, activation), 1e-4f, 1e-4f))
              << "m=" << m << " activation=" << static_cast<int>(activation)
              << " bias=" << with_bias << " accumulate=" << accumulate;
        }
      }
    }
  }
}

// Panel j of a bf16 weight holds columns [64j, 64j + 64) of Wᵀ rounded to bfloat16, K padded to
// 32 with zeros, rows paired (oneDNN's BA16a64b2a); unpacked, it is the rounded weight exactly.
TEST(Bf16WeightTest, LaysOutPairedPanelsOfTheRoundedWeight) {
  const Tensor w = Random({150, 45}, 1);
  const Bf16Weight packed = Bf16Weight::Pack(w);
  ASSERT_EQ(packed.panels(), 3);
  ASSERT_EQ(packed.padded_k(), 64);
  const Tensor rounded = RoundedToBf16(w);
  for (int64_t j = 0; j < packed.panels(); ++j) {
    for (int64_t r = 0; r < packed.padded_k(); ++r) {
      for (int64_t c = 0; c < Bf16Weight::kPanelWidth; ++c) {
        const int64_t column = j * Bf16Weight::kPanelWidth + c;
        const float expected = r < 45 && column < 150 ? rounded.row(column)[r] : 0.0f;
        const uint16_t stored =
            packed.data()[(j * packed.padded_k() + r / 2 * 2) * 64 + 2 * c + r % 2];
        ASSERT_EQ(std::bit_cast<float>(uint32_t{stored} << 16), expected)
            << "panel " << j << " row " << r << " column " << c;
      }
    }
  }
  EXPECT_TRUE(AllClose(packed.Unpack(), rounded, 0.0f, 0.0f));
  EXPECT_FALSE(AllClose(rounded, w, 1e-4f, 1e-4f));  // rounding to 8 mantissa bits shows
}

// --weights=bf16 for every row count, with and without accumulation: the products of the rounded
// weights with x rounded to bfloat16 too (AMX) or not (elsewhere), summed in float32. Against the
// float64 reference on the rounded weights, an element may differ by x's rounding: 2⁻⁸ of Σ|x·w|.
TEST(LinearTest, Bf16WeightsMatchTheReferenceOfTheirRoundedValues) {
  const int64_t n = 150, k = 45;
  const Tensor w = Random({n, k}, 1), b = Random({n}, 2);
  const Tensor rounded = RoundedToBf16(w);
  Tensor magnitude = rounded.Clone();
  for (int64_t i = 0; i < magnitude.size(); ++i) {
    magnitude.data()[i] = std::abs(magnitude.data()[i]);
  }
  for (int64_t m : {1, 3, 13, 64, 600}) {
    const Tensor x = Random({m, k}, 3 + m);
    Tensor x_magnitude = x.Clone();
    for (int64_t i = 0; i < x.size(); ++i) x_magnitude.data()[i] = std::abs(x.data()[i]);
    const Tensor bound = Reference(x_magnitude, magnitude, Tensor(), Tensor(), Activation::kNone);
    for (bool accumulate : {false, true}) {
      const LinearWeights linear = PrepareLinear(w, b, {.bf16 = true});
      ASSERT_TRUE(linear.weight.empty() || linear.bf16.empty());
      Tensor y = Random({m, n}, 99);
      const Tensor y0 = accumulate ? y.Clone() : Tensor();
      ASSERT_TRUE(Linear(x, linear, y, {accumulate, Activation::kNone}).ok());
      const Tensor expected = Reference(x, rounded, b, y0, Activation::kNone);
      for (int64_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y.data()[i], expected.data()[i], 1e-5f + bound.data()[i] / 256.0f)
            << "m=" << m << " accumulate=" << accumulate << " element " << i;
      }
    }
  }
}

// One cached primitive runs on several threads at once, also from inside a parallel region (the
// tiles of an int8 matmul, where it runs single-threaded on each): each execution brings its own
// scratchpad. With oneDNN's own scratchpad the parallel region's results were NaN.
TEST(LinearTest, OnePrimitiveRunsOnSeveralThreadsAtOnce) {
  const int64_t m = 128, k = 3072, n = 768;
  const LinearWeights linear = PrepareLinear(Random({n, k}, 1), Random({n}, 2));
  const Tensor x = Random({m, k}, 3);
  Tensor expected({m, n});
  ASSERT_TRUE(Linear(x, linear, expected).ok());
  std::vector<Tensor> results;
  for (int t = 0; t < 4; ++t) results.push_back(Tensor({m, n}));
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) ASSERT_TRUE(Linear(x, linear, results[t]).ok());
    });
  }
  for (std::thread& thread : threads) thread.join();
#pragma omp parallel for num_threads(2)
  for (int t = 2; t < 4; ++t) {
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(Linear(x, linear, results[t]).ok());
  }
  for (int t = 0; t < 4; ++t) {
    EXPECT_TRUE(AllClose(results[t], expected, 1e-4f, 1e-4f))
        << (t < 2 ? "thread " : "region ") << t;
  }
}

TEST(LinearTest, ReadsAndWritesStridedRows) {
  for (int64_t m : {3, 7}) {
    const Tensor wide_x = Random({m, 50}, 4), wide_w = Random({30, 50}, 5);
    const Tensor x = wide_x.Slice(1, 10, 20), w = wide_w.Slice(1, 5, 20);
    Tensor wide_y = Tensor::Zeros({m, 64});
    Tensor y = wide_y.Slice(1, 32, 30);
    ASSERT_TRUE(Linear(x, w, Tensor(), y).ok());
    EXPECT_TRUE(AllClose(y, Reference(x.Clone(), w.Clone(), Tensor(), Tensor(), Activation::kNone)))
        << "m=" << m;
    EXPECT_EQ(wide_y.row(1)[31], 0.0f);  // untouched outside the view
    EXPECT_EQ(wide_y.row(1)[62], 0.0f);
  }
}

TEST(LinearTest, OnePrimitiveServesEveryBatchSize) {
  const Tensor w = Random({16, 8}, 6);
  auto count = [] { return CreatedMatmulPrimitives().size(); };
  Tensor y1({5, 16}), y2({33, 16});
  ASSERT_TRUE(Linear(Random({5, 8}, 7), w, Tensor(), y1).ok());
  const size_t after_first = count();
  ASSERT_TRUE(Linear(Random({33, 8}, 8), w, Tensor(), y2).ok());
  EXPECT_EQ(count(), after_first);
}

TEST(LinearTest, RefusesMismatchedShapes) {
  Tensor y({2, 3});
  absl::Status status = Linear(Random({2, 4}, 1), Random({3, 5}, 2), Tensor(), y);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "[3, 5]")) << status;
}

// docs/design.md: some shapes silently fall to oneDNN's reference kernels, hundreds of times
// slower. Every matmul the engine's hot path creates (GPT-2-small shapes and the per-head slices
// of out_proj) must resolve to an optimized implementation.
TEST(LinearTest, HotPathPrimitivesAreNeverReferenceKernels) {
  const int64_t d = 768, heads = 12, dh = 64;
  const Tensor x = Random({9, d}, 1);
  Tensor qkv({9, 3 * d}), ffn({9, 4 * d}), out({9, d});
  ASSERT_TRUE(Linear(x, Random({3 * d, d}, 2), Random({3 * d}, 3), qkv).ok());
  ASSERT_TRUE(
      Linear(x, Random({4 * d, d}, 4), Random({4 * d}, 5), ffn, {false, Activation::kGeluErf})
          .ok());
  ASSERT_TRUE(
      Linear(x, Random({4 * d, d}, 4), Random({4 * d}, 5), ffn, {false, Activation::kGeluTanh})
          .ok());
  ASSERT_TRUE(
      Linear(x, Random({4 * d, d}, 4), Random({4 * d}, 5), ffn, {false, Activation::kRelu}).ok());
  ASSERT_TRUE(Linear(ffn, Random({d, 4 * d}, 6), Random({d}, 7), out, {true}).ok());
  const Tensor out_weight = Random({d, heads * dh}, 8);
  Tensor contributions({9, heads * d});
  Tensor head_out = contributions.Slice(1, d, d);
  ASSERT_TRUE(Linear(x.Slice(1, dh, dh), out_weight.Slice(1, dh, dh), Tensor(), head_out).ok());
  if (PackedWeight::PackingIsFaster()) {  // 9 rows: chunks of 8 and 1
    const Tensor w = Random({3 * d, d}, 2);
    ASSERT_TRUE(
        Linear(x, LinearWeights{w, Random({3 * d}, 3), PackedWeight::Pack(w), {}}, qkv).ok());
    const Tensor w2 = Random({d, 4 * d}, 6);
    ASSERT_TRUE(
        Linear(ffn, LinearWeights{w2, Random({d}, 7), PackedWeight::Pack(w2), {}}, out, {true})
            .ok());
  }

  // A gated feed-forward network at SmolLM's widths: [fc1; gate] with SiLU, then fc2.
  const int64_t f = 1536, width = 576;
  Tensor x_ffn = Random({9, width}, 9), up_gate({9, 2 * f}), y({9, width});
  ASSERT_TRUE(Linear(x_ffn, Random({2 * f, width}, 10), Tensor(), up_gate).ok());
  ASSERT_TRUE(Linear(GatedActivation(up_gate, Activation::kSilu), Random({width, f}, 11), Tensor(),
                     y, {true})
                  .ok());
  Tensor up = up_gate.Slice(1, 0, f);
  ASSERT_TRUE(Linear(x_ffn, Random({f, width}, 12), Tensor(), up, {false, Activation::kSilu}).ok());

  const auto primitives = CreatedMatmulPrimitives();
  ASSERT_FALSE(primitives.empty());
  for (const PrimitiveInfo& info : primitives) {
    EXPECT_FALSE(absl::StartsWith(info.implementation, "ref"))
        << info.key << " resolved to " << info.implementation;
  }
}

}  // namespace
}  // namespace attnserve
