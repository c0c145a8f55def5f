// Behaviour of the attention layers beyond the golden comparisons: validation messages, batch
// independence, decoding against a longer key set, and the linear-attention recurrence.
#include <gtest/gtest.h>

#include <random>

#include "absl/strings/match.h"
#include "engine/attention/head_contributions.h"
#include "engine/attention/linear.h"
#include "engine/attention/multi_head.h"
#include "engine/attention/pointer.h"
#include "engine/attention/scaled_dot_product.h"
#include "engine/bf16.h"
#include "engine/f16.h"
#include "tests/tensor_compare.h"

namespace attnserve {
namespace {

using ::attnserve::testing::AllClose;

Tensor Random(Shape shape, uint32_t seed, float scale = 1.0f) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  for (int64_t i = 0; i < t.size(); ++i) t.data()[i] = normal(rng);
  return t;
}

AttentionConfig SelfConfig(AttentionKind kind, bool causal) {
  AttentionConfig config;
  config.kind = kind;
  config.model_dim = 24;
  config.num_heads = 3;
  config.head_dim_qk = 8;
  config.head_dim_v = 5;
  config.causal = causal;
  return config;
}

AttentionWeights RandomWeights(const AttentionConfig& c, uint32_t seed) {
  const int64_t qk = c.num_heads * c.head_dim_qk, v = c.num_heads * c.head_dim_v;
  const float s = 0.3f;
  return {Random({qk, c.model_dim}, seed, s),           Random({qk}, seed + 1, s),
          Random({qk, c.key_input_dim()}, seed + 2, s), Random({qk}, seed + 3, s),
          Random({v, c.key_input_dim()}, seed + 4, s),  Random({v}, seed + 5, s),
          Random({c.out_dim(), v}, seed + 6, s),        Random({c.out_dim()}, seed + 7, s)};
}

void ExpectInvalid(const absl::Status& status, const std::string& fragment) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), fragment)) << status;
}

TEST(AttentionTest, CreateNamesTheTensorWithTheWrongShape) {
  const AttentionConfig config = SelfConfig(AttentionKind::kSoftmax, false);
  AttentionWeights weights = RandomWeights(config, 1);
  weights.v_weight = Random({15, 23}, 2);
  ExpectInvalid(MultiHeadAttention::Create(config, weights).status(),
                "v_proj.weight has shape [15, 23], expected [15, 24]");
  weights = RandomWeights(config, 1);
  weights.out_bias = Random({5}, 3);
  ExpectInvalid(MultiHeadAttention::Create(config, weights).status(), "out_proj.bias");
  weights.q_weight = Tensor();
  ExpectInvalid(MultiHeadAttention::Create(config, weights).status(), "q_proj.weight is missing");
}

TEST(AttentionTest, CreateRefusesContradictoryConfigs) {
  AttentionConfig config = SelfConfig(AttentionKind::kExclusive, false);
  config.memory_dim = 16;
  ExpectInvalid(MultiHeadAttention::Create(config, RandomWeights(config, 1)).status(),
                "needs self-attention");
  config = SelfConfig(AttentionKind::kLinear, true);
  config.alibi = true;
  ExpectInvalid(MultiHeadAttention::Create(config, RandomWeights(config, 1)).status(), "ALiBi");
  config = SelfConfig(AttentionKind::kSoftmax, false);
  config.num_heads = 0;
  ExpectInvalid(CheckAttentionConfig(config), "num_heads");
}

TEST(AttentionTest, ForwardRefusesBadBatches) {
  AttentionConfig config = SelfConfig(AttentionKind::kSoftmax, false);
  auto layer = MultiHeadAttention::Create(config, RandomWeights(config, 1));
  ASSERT_TRUE(layer.ok());
  ExpectInvalid(layer->Forward({Random({2, 5, 24}, 1), {5, 6}}).status(), "length 6");
  ExpectInvalid(layer->Forward({Random({2, 5, 24}, 1), {5}}).status(), "1 lengths");
  ExpectInvalid(layer->Forward({Random({2, 5, 23}, 1), {5, 5}}).status(), "width 23");
  PaddedBatch memory{Random({2, 5, 24}, 2), {5, 5}};
  ExpectInvalid(layer->Forward({Random({2, 5, 24}, 1), {5, 5}}, &memory).status(),
                "given a memory");

  config.memory_dim = 16;
  config.causal = true;
  auto cross = MultiHeadAttention::Create(config, RandomWeights(config, 3));
  ASSERT_TRUE(cross.ok()) << cross.status();
  ExpectInvalid(cross->Forward({Random({1, 5, 24}, 1), {5}}).status(), "needs a memory");
  memory = {Random({1, 4, 16}, 2), {4}};
  ExpectInvalid(cross->Forward({Random({1, 5, 24}, 1), {5}}, &memory).status(), "only 4 keys");
  memory = {Random({1, 4, 16}, 2), {0}};
  ExpectInvalid(cross->Forward({Random({1, 5, 24}, 1), {3}}, &memory).status(),
                "empty attention memory");
}

// A sequence's output must not depend on what else is in the batch, nor on padding values.
TEST(AttentionTest, SequencesInABatchAreIndependent) {
  for (AttentionKind kind :
       {AttentionKind::kSoftmax, AttentionKind::kExclusive, AttentionKind::kLinear}) {
    for (bool causal : {false, true}) {
      AttentionConfig config = SelfConfig(kind, causal);
      config.alibi = kind != AttentionKind::kLinear;
      auto layer = MultiHeadAttention::Create(config, RandomWeights(config, 7));
      ASSERT_TRUE(layer.ok());
      Tensor batch = Random({2, 40, 24}, 11);
      Tensor alone = batch.Slice(0, 1, 1).Slice(1, 0, 13).Clone();
      auto batched = layer->Forward({batch, {40, 13}});
      auto single = layer->Forward({alone, {13}});
      ASSERT_TRUE(batched.ok() && single.ok());
      EXPECT_TRUE(AllClose(batched->Slice(0, 1, 1).Slice(1, 0, 13), *single));
      EXPECT_EQ(batched->Select(1).row(20)[0], 0.0f);  // padding rows are zero
    }
  }
}

// Queries aligned to the end of a longer key set (a decoder step against a cache) see the same
// keys as the last rows of the full causal pass.
TEST(AttentionTest, CausalQueriesAlignToTheEndOfTheKeys) {
  for (AttentionKind kind : {AttentionKind::kSoftmax, AttentionKind::kLinear}) {
    AttentionConfig config = SelfConfig(kind, true);
    config.memory_dim = 24;  // cross-attention over the same sequence = self-attention
    config.alibi = kind == AttentionKind::kSoftmax;
    auto layer = MultiHeadAttention::Create(config, RandomWeights(config, 5));
    ASSERT_TRUE(layer.ok());
    Tensor x = Random({1, 30, 24}, 9);
    PaddedBatch keys{x, {30}};
    auto full = layer->Forward({x, {30}}, &keys);
    auto tail = layer->Forward({x.Slice(1, 27, 3).Clone(), {3}}, &keys);
    ASSERT_TRUE(full.ok() && tail.ok());
    EXPECT_TRUE(AllClose(*tail, full->Slice(1, 27, 3)));
  }
}

// Decoding's kernel (up to 4 queries, keys read in place, eight at a time) against the tiled
// kernel for many queries: the last query of a causal pass over 45 keys, with ALiBi, at head
// widths on and off its vector paths (dk multiple of 8, dv multiple of 64, or neither).
TEST(ScaledDotProductTest, DecodingKernelMatchesTheTiledKernel) {
  const int64_t heads = 3, time = 45;
  const std::vector<float> slopes = {0.5f, 0.25f, 0.125f};
  for (auto [dk, dv] : {std::pair<int64_t, int64_t>{64, 64}, {8, 128}, {12, 20}}) {
    const Tensor q = Random({1, time, heads * dk}, 1), k = Random({1, time, heads * dk}, 2);
    const Tensor v = Random({1, time, heads * dv}, 3);
    const ScoreOptions options{0.125f, true, slopes};
    const std::vector<int64_t> all = {time}, one = {1};
    Tensor full({1, time, heads * dv}), last({1, 1, heads * dv});
    ScaledDotProductAttention(q, all, k, v, all, heads, options, full);
    ScaledDotProductAttention(q.Slice(1, time - 1, 1), one, k, v, all, heads, options, last);
    EXPECT_TRUE(AllClose(last, full.Slice(1, time - 1, 1), 1e-5f, 1e-5f))
        << "dk=" << dk << " dv=" << dv;
  }
}

// Decoding splits a long cache's keys among the threads and merges the parts' softmaxes: the same
// as the tiled kernel over the whole cache. Two sequences of different lengths (1,100 and 700
// keys: several parts, the last ones uneven), grouped heads, ALiBi, and a sliding window that
// starts inside the cache.
TEST(ScaledDotProductTest, DecodingSplitsLongCachesExactly) {
  const int64_t heads = 6, kv_heads = 2, dk = 64, dv = 64, time = 1100;
  const std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f};
  const Tensor q = Random({2, time, heads * dk}, 1), k = Random({2, time, kv_heads * dk}, 2);
  const Tensor v = Random({2, time, kv_heads * dv}, 3);
  for (int64_t window : {int64_t{0}, int64_t{600}}) {
    for (bool alibi : {false, true}) {
      const ScoreOptions options{
          .scale = 0.125f,
          .causal = true,
          .alibi_slopes = alibi ? std::span<const float>(slopes) : std::span<const float>(),
          .kv_heads = kv_heads,
          .window = window};
      const std::vector<int64_t> lengths = {time, 700};
      Tensor full({2, time, heads * dv});
      ScaledDotProductAttention(q, lengths, k, v, lengths, heads, options, full);
      for (int64_t queries : {int64_t{1}, int64_t{3}}) {
        // Each sequence's last `queries` rows, against all of its keys.
        Tensor last({2, queries, heads * dk}), expected({2, queries, heads * dv});
        for (int64_t b = 0; b < 2; ++b) {
          for (int64_t i = 0; i < queries; ++i) {
            const int64_t row = lengths[b] - queries + i;
            std::copy(q.Select(b).row(row), q.Select(b).row(row) + heads * dk,
                      last.Select(b).row(i));
            std::copy(full.Select(b).row(row), full.Select(b).row(row) + heads * dv,
                      expected.Select(b).row(i));
          }
        }
        Tensor decoded({2, queries, heads * dv});
        const std::vector<int64_t> q_lengths = {queries, queries};
        ScaledDotProductAttention(last, q_lengths, k, v, lengths, heads, options, decoded);
        EXPECT_TRUE(AllClose(decoded, expected, 1e-5f, 1e-5f))
            << "window=" << window << " alibi=" << alibi << " queries=" << queries;
      }
    }
  }
}

// A two-byte KV cache in blocks gives what float32 attention gives over the same keys and values
// rounded to its type: the kernels widen them exactly. Both kernels (a few queries read the rows
// in place, more are packed), vector and scalar head widths, grouped heads.
template <typename T>
void ExpectBlocksAttendAsTheirValuesRoundedToFloat(T (*narrow)(float), float (*widen)(T)) {
  const int64_t heads = 4, kv_heads = 2, time = 45, block_rows = 7;
  for (auto [dk, dv] : {std::pair<int64_t, int64_t>{64, 64}, {8, 128}, {12, 20}}) {
    const Tensor q = Random({1, time, heads * dk}, 1);
    Tensor k = Random({1, time, kv_heads * dk}, 2), v = Random({1, time, kv_heads * dv}, 3);
    std::vector<T> k16(k.size()), v16(v.size());
    for (int64_t i = 0; i < k.size(); ++i) k.data()[i] = widen(k16[i] = narrow(k.data()[i]));
    for (int64_t i = 0; i < v.size(); ++i) v.data()[i] = widen(v16[i] = narrow(v.data()[i]));
    std::vector<const T*> key_blocks, value_blocks;
    for (int64_t row = 0; row < time; row += block_rows) {
      key_blocks.push_back(k16.data() + row * kv_heads * dk);
      value_blocks.push_back(v16.data() + row * kv_heads * dv);
    }
    const std::vector<RowBlocksOf<T>> keys = {{key_blocks.data(), block_rows, kv_heads * dk}};
    const std::vector<RowBlocksOf<T>> values = {{value_blocks.data(), block_rows, kv_heads * dv}};
    const ScoreOptions options{
        .scale = 0.125f, .causal = true, .alibi_slopes = {}, .kv_heads = kv_heads, .window = 0};
    const std::vector<int64_t> all = {time};
    for (int64_t queries : {int64_t{1}, int64_t{3}, time}) {
      const Tensor last = q.Slice(1, time - queries, queries);
      const std::vector<int64_t> q_lengths = {queries};
      Tensor expected({1, queries, heads * dv}), paged({1, queries, heads * dv});
      ScaledDotProductAttention(last, q_lengths, k, v, all, heads, options, expected);
      ScaledDotProductAttention(last, q_lengths, std::span<const RowBlocksOf<T>>(keys),
                                std::span<const RowBlocksOf<T>>(values), all, heads, options,
                                paged);
      EXPECT_TRUE(AllClose(paged, expected, 1e-5f, 1e-5f))
          << "dk=" << dk << " dv=" << dv << " queries=" << queries;
    }
  }
}

TEST(ScaledDotProductTest, HalfBlocksAttendAsTheirValuesRoundedToFloat) {
  ExpectBlocksAttendAsTheirValuesRoundedToFloat<Half>(ToF16, FromF16);
}

TEST(ScaledDotProductTest, Bf16BlocksAttendAsTheirValuesRoundedToFloat) {
  ExpectBlocksAttendAsTheirValuesRoundedToFloat<uint16_t>(ToBf16, FromBf16);
}

TEST(LinearAttentionTest, RecurrenceStepsMatchTheCausalPass) {
  const int64_t heads = 4, dk = 6, dv = 4, time = 50;
  for (FeatureMap map : {FeatureMap::kEluPlusOne, FeatureMap::kExp}) {
    for (int64_t kv_heads : {4, 2, 1}) {
      Tensor q = Random({1, time, heads * dk}, 1), k = Random({1, time, kv_heads * dk}, 2);
      Tensor v = Random({1, time, kv_heads * dv}, 3);
      Tensor full({1, time, heads * dv});
      const std::vector<int64_t> lengths = {time};
      LinearAttention(q, lengths, k, v, lengths, heads, kv_heads, map, true, full);

      LinearAttentionState state(heads, kv_heads, dk, dv);
      Tensor stepped({1, time, heads * dv});
      for (int64_t t = 0; t < time; ++t) {
        state.Step(k.Select(0).row(t), v.Select(0).row(t), q.Select(0).row(t), map,
                   stepped.Select(0).row(t));
      }
      EXPECT_EQ(state.tokens(), time);
      EXPECT_TRUE(AllClose(stepped, full)) << kv_heads << " key/value heads";
      state.Reset();
      EXPECT_EQ(state.tokens(), 0);
    }
  }
}

TEST(HeadContributionsTest, SumToTheOutputMinusBias) {
  AttentionConfig config = SelfConfig(AttentionKind::kSoftmax, true);
  AttentionWeights weights = RandomWeights(config, 4);
  auto layer = MultiHeadAttention::Create(config, weights);
  ASSERT_TRUE(layer.ok());
  Tensor heads;
  auto output = layer->Forward({Random({1, 9, 24}, 3), {9}}, nullptr, &heads);
  ASSERT_TRUE(output.ok());
  auto contributions = HeadContributions(heads, weights.out_weight, config.num_heads);
  ASSERT_TRUE(contributions.ok());
  Tensor sum({1, 9, 24});
  for (int64_t t = 0; t < 9; ++t) {
    for (int64_t d = 0; d < 24; ++d) {
      float s = weights.out_bias.data()[d];
      for (int64_t h = 0; h < 3; ++h) s += contributions->data()[(t * 3 + h) * 24 + d];
      sum.data()[t * 24 + d] = s;
    }
  }
  EXPECT_TRUE(AllClose(sum, *output));
  ExpectInvalid(HeadContributions(heads, weights.out_weight, 4).status(), "4 heads");
}

TEST(PointerAttentionTest, RefusesMismatchedWeights) {
  ExpectInvalid(
      PointerAttention::Create({Random({8, 5}, 1), Random({7, 4}, 2), Random({1, 8}, 3)}).status(),
      "query_proj.weight");
  ExpectInvalid(
      PointerAttention::Create({Random({8, 5}, 1), Random({8, 4}, 2), Random({8}, 3)}).status(),
      "score.weight");
}

}  // namespace
}  // namespace attnserve
