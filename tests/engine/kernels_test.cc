// Properties of the kernels beyond the golden comparisons: accuracy over the whole input range,
// stability at extremes, and the errors bad inputs get.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "engine/f16.h"
#include "engine/kernels/activations.h"
#include "engine/kernels/alibi.h"
#include "engine/kernels/embedding.h"
#include "engine/kernels/normalization.h"
#include "engine/kernels/rotary.h"
#include "engine/kernels/softmax.h"

namespace attnserve {
namespace {

// Every half widens exactly and narrows back to itself; floats round to the nearest half, ties
// to even, the same with F16C and in integer arithmetic; beyond ±65504 they saturate.
TEST(KernelsTest, HalfPrecisionRoundsToNearestEvenAndSaturates) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const Half half = static_cast<Half>(bits);
    const float value = FromF16(half);
    EXPECT_EQ(std::bit_cast<uint32_t>(value), std::bit_cast<uint32_t>(FromF16Portable(half)))
        << bits;
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(FromF16(ToF16(value))));
      continue;
    }
    if (std::isinf(value)) continue;  // saturates, below
    ASSERT_EQ(static_cast<uint16_t>(ToF16(value)), bits);
    ASSERT_EQ(static_cast<uint16_t>(ToF16Portable(value)), bits);
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    const float value = std::bit_cast<float>(any(rng) & 0xc7ffffffu);  // |value| < 2^17 or so
    if (std::isnan(value)) continue;
    ASSERT_EQ(static_cast<uint16_t>(ToF16(value)), static_cast<uint16_t>(ToF16Portable(value)))
        << value;
  }
  std::vector<float> row(37);
  for (float& value : row) value = std::bit_cast<float>(any(rng) & 0xc7ffffffu);
  row[3] = NAN;
  row[9] = -INFINITY;
  row[17] = 1e9f;
  std::vector<Half> narrowed(row.size());
  ToF16(row.data(), static_cast<int64_t>(row.size()), narrowed.data());
  for (size_t i = 0; i < row.size(); ++i) {
    if (std::isnan(row[i])) {
      EXPECT_TRUE(std::isnan(FromF16(narrowed[i])));
    } else {
      EXPECT_EQ(static_cast<uint16_t>(narrowed[i]), static_cast<uint16_t>(ToF16(row[i]))) << i;
    }
  }
  EXPECT_EQ(FromF16(ToF16(1.0f + 1.0f / 2048)), 1.0f) << "a tie goes to the even neighbour";
  EXPECT_EQ(FromF16(ToF16(1.0f + 3.0f / 2048)), 1.0f + 4.0f / 2048);
  EXPECT_EQ(FromF16(ToF16(1e6f)), kHalfMax);
  EXPECT_EQ(FromF16(ToF16Portable(-INFINITY)), -kHalfMax);
  EXPECT_EQ(FromF16(ToF16(1e-8f)), 0.0f);
  EXPECT_EQ(FromF16(ToF16Portable(3e-8f)), std::ldexp(1.0f, -24)) << "the smallest subnormal";
}

TEST(KernelsTest, ExpIsAccurateOverItsRange) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.01337f) x.push_back(v);
  std::vector<float> y = x;
  ExpInPlace(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double expected = std::exp(static_cast<double>(x[i]));
    ASSERT_NEAR(y[i] / expected, 1.0, 2e-6) << "exp(" << x[i] << ")";
  }
}

TEST(KernelsTest, SoftmaxIsStableAtExtremes) {
  std::vector<float> row = {1e30f, -1e30f, 3e38f, 0.0f, -std::numeric_limits<float>::infinity(),
                            5.0f,  5.0f,   5.0f,  5.0f, 7.0f};
  MaskedSoftmaxRow(row.data(), 10, 10);
  float sum = 0.0f;
  for (float p : row) {
    ASSERT_TRUE(std::isfinite(p));
    sum += p;
  }
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
  EXPECT_NEAR(row[2], 1.0f, 1e-6f);
}

TEST(KernelsTest, SoftmaxOfNoValidEntriesIsZero) {
  std::vector<float> row(9, 1.0f);
  MaskedSoftmaxRow(row.data(), 0, 9);
  for (float p : row) EXPECT_EQ(p, 0.0f);
  MaskedLogSoftmaxRow(row.data(), 0, 9);
  for (float p : row) EXPECT_EQ(p, -std::numeric_limits<float>::infinity());
}

TEST(KernelsTest, RmsNormScalesByTheRootMeanSquareNotTheNorm) {
  // x = (3, 4): mean(x²) = 12.5, so y = x / sqrt(12.5) (not x / 5, nor x / (5 / sqrt(2))·2).
  Tensor x({1, 2});
  x.data()[0] = 3.0f;
  x.data()[1] = 4.0f;
  Tensor gain({2});
  gain.Fill(1.0f);
  Tensor y({1, 2});
  ASSERT_TRUE(RmsNorm(x, gain, 0.0f, y).ok());
  EXPECT_NEAR(y.data()[0], 3.0f / std::sqrt(12.5f), 1e-6f);
  EXPECT_NEAR(y.data()[1], 4.0f / std::sqrt(12.5f), 1e-6f);
}

TEST(KernelsTest, NormsRefuseMismatchedParameters) {
  Tensor x({2, 8}), y({2, 8}), wrong({7});
  absl::Status status = LayerNorm(x, wrong, Tensor(), 1e-5f, y);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "gamma")) << status;
  EXPECT_FALSE(RmsNorm(x, wrong, 1e-6f, y).ok());
  Tensor other({2, 9});
  EXPECT_FALSE(ScaleNorm(x, 1.0f, 1e-5f, other).ok());
}

TEST(KernelsTest, EmbeddingNamesAnOutOfRangeToken) {
  Tensor table = Tensor::Zeros({10, 4}), out({3, 4});
  const std::vector<int64_t> ids = {1, 10, 2};
  absl::Status status = EmbedTokens(table, ids, out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "token id 10 at position 1")) << status;
  const std::vector<int64_t> negative = {-1, 0, 0};
  EXPECT_FALSE(EmbedTokens(table, negative, out).ok());
}

TEST(KernelsTest, PositionsPastTheTableAreRefused) {
  Tensor table = Tensor::Zeros({8, 4}), x = Tensor::Zeros({1, 6, 4});
  const std::vector<int64_t> lengths = {6};
  EXPECT_TRUE(AddPositions(table, lengths, 2, x).ok());
  absl::Status status = AddPositions(table, lengths, 3, x);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "position 8")) << status;
}

TEST(KernelsTest, AlibiSlopesFollowThePaper) {
  const std::vector<float> eight = AlibiSlopes(8);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(eight[i], std::pow(2.0f, -(i + 1.0f)));
  // 6 heads: the 4 slopes of 4 heads, then slopes 1 and 3 of 8 heads.
  const std::vector<float> six = AlibiSlopes(6);
  const float expected[] = {0.25f, 0.0625f, 1.0f / 64, 1.0f / 256, 0.5f, 0.125f};
  ASSERT_EQ(six.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(six[i], expected[i]) << i;
}

// Pair i of a half-split head holding (1, 0), rotated at `position`: (cos_i, sin_i) as the kernel
// forms them.
std::pair<float, float> RotatedUnitPair(const RotaryEmbedding& rotary, int64_t dims, int64_t pair,
                                        int64_t position, int64_t context) {
  std::vector<float> head(dims, 0.0f);
  head[pair] = 1.0f;
  rotary.Apply(head.data(), dims, 1, 1, dims, position, context);
  return {head[pair], head[pair + dims / 2]};
}

TEST(KernelsTest, RotaryAnglesAreFloatProductsAsTransformersForms) {
  // transformers' angle is position · θ_i rounded to float32; the exact product differs from it
  // by up to 2.4e-4 radians at 8k positions, enough to shift log-probabilities by 1e-3.
  RotaryConfig config;
  config.dims = 128;
  config.theta = 500000.0;
  const RotaryEmbedding rotary(config);
  const std::vector<float> theta = rotary.InverseFrequencies(8192);
  int64_t products_that_round = 0;
  for (int64_t position : {255, 4097, 8191, 8703}) {
    for (int64_t i = 0; i < 64; ++i) {
      const float angle = static_cast<float>(position) * theta[i];
      products_that_round += static_cast<double>(angle) != position * static_cast<double>(theta[i]);
      const auto [cosine, sine] = RotatedUnitPair(rotary, 128, i, position, 8192);
      ASSERT_EQ(cosine, static_cast<float>(std::cos(static_cast<double>(angle)))) << position;
      ASSERT_EQ(sine, static_cast<float>(std::sin(static_cast<double>(angle)))) << position;
    }
  }
  EXPECT_GT(products_that_round, 100);  // the check above tells the two apart
}

TEST(KernelsTest, LongRopePicksItsFactorsByContextAndScalesByTheAttentionFactor) {
  RotaryConfig config;
  config.dims = 8;
  config.scaling = RopeScaling::kLongRope;
  config.original_max_positions = 16;
  config.attention_factor = 1.25;
  config.short_factor = {1.0f, 1.0f, 1.0f, 1.0f};
  config.long_factor = {2.0f, 4.0f, 8.0f, 16.0f};
  ASSERT_TRUE(CheckRotaryConfig(config, 8).ok());
  const RotaryEmbedding rotary(config);
  const std::vector<float> within = rotary.InverseFrequencies(16),
                           past = rotary.InverseFrequencies(17);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(within[i], 1.0f / std::pow(10000.0f, i / 4.0f)) << i;
    EXPECT_FLOAT_EQ(past[i], within[i] / config.long_factor[i]) << i;
  }
  // The rotated pair's length is the attention factor, at any position.
  for (int64_t position : {0, 5, 16}) {
    const auto [cosine, sine] = RotatedUnitPair(rotary, 8, 1, position, position + 1);
    EXPECT_NEAR(std::hypot(cosine, sine), 1.25, 1e-6);
  }
  config.long_factor.pop_back();
  absl::Status status = CheckRotaryConfig(config, 8);
  EXPECT_TRUE(absl::StrContains(status.message(), "long_factor has 3 values")) << status;
  config.scaling = RopeScaling::kYarn;
  config.beta_fast = 0;
  status = CheckRotaryConfig(config, 8);
  EXPECT_TRUE(absl::StrContains(status.message(), "beta_fast is 0")) << status;
}

}  // namespace
}  // namespace attnserve
