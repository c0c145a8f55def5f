// The paged KV cache: the block pool's accounting, prefix publishing and eviction, and the demo
// model decoding over blocks (small, odd-sized ones included) and from a reused prefix exactly
// as a fresh computation does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>

#include "engine/architectures/model.h"

namespace attnserve {
namespace {

constexpr char kDemo[] = ATTNSERVE_SOURCE_DIR "/models/demo";

KvBlockShape SmallShape(int64_t block_tokens) {
  KvBlockShape shape;
  shape.layers = 2;
  shape.key_width = 8;
  shape.value_width = 4;
  shape.block_tokens = block_tokens;
  return shape;
}

std::vector<int64_t> Tokens(int64_t first, int64_t count) {
  std::vector<int64_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(KvBlockPoolTest, AllocatesEveryBlockOnceAndReusesReleasedOnes) {
  auto pool = KvBlockPool::Create(SmallShape(4), 3);
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<int32_t> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back((*pool)->Allocate());
  std::sort(blocks.begin(), blocks.end());
  EXPECT_EQ(blocks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ((*pool)->free_blocks(), 0);
  EXPECT_EQ((*pool)->Allocate(), -1);
  (*pool)->Retain(1);
  (*pool)->Release(1);
  EXPECT_EQ((*pool)->free_blocks(), 0) << "block 1 still has a reference";
  (*pool)->Release(1);
  EXPECT_EQ((*pool)->free_blocks(), 1);
  EXPECT_EQ((*pool)->Allocate(), 1);
  // Blocks of different layers and kinds never overlap.
  const KvBlockPool& p = **pool;
  constexpr int64_t kFloat = sizeof(float);
  EXPECT_EQ(p.keys(0, 1) + 4 * 8 * kFloat, p.keys(0, 2));
  EXPECT_EQ(p.keys(0, 2) + 4 * 8 * kFloat, p.values(0, 0));
  EXPECT_EQ(p.values(0, 2) + 4 * 4 * kFloat, p.keys(1, 0));
}

TEST(KvBlockPoolTest, CacheTypesAreNamedAndFoundByName) {
  for (KvCacheType type : {KvCacheType::kFloat32, KvCacheType::kF16, KvCacheType::kBf16}) {
    EXPECT_EQ(KvCacheTypeNamed(KvCacheTypeName(type)), type) << KvCacheTypeName(type);
  }
  EXPECT_STREQ(KvCacheTypeName(KvCacheType::kF16), "f16");
  for (const char* name : {"auto", "fp16", "", "F16"}) {
    EXPECT_EQ(KvCacheTypeNamed(name), std::nullopt) << name;
  }
}

TEST(KvBlockPoolTest, RefusesBadShapes) {
  EXPECT_FALSE(KvBlockPool::Create(SmallShape(0), 3).ok());
  EXPECT_FALSE(KvBlockPool::Create(SmallShape(4), 0).ok());
}

TEST(KvBlockPoolTest, PublishedBlocksAreFoundUntilEvictedLeastRecentlyReleasedFirst) {
  auto created = KvBlockPool::Create(SmallShape(2), 3);
  ASSERT_TRUE(created.ok());
  KvBlockPool& pool = **created;
  const int32_t a = pool.Allocate(), b = pool.Allocate();
  pool.Publish(-1, Tokens(0, 2), a);
  pool.Publish(a, Tokens(2, 2), b);
  EXPECT_EQ(pool.Lookup(-1, Tokens(1, 2)), -1) << "other tokens";
  EXPECT_EQ(pool.Lookup(b, Tokens(2, 2)), -1) << "another parent";
  EXPECT_EQ(pool.Lookup(-1, Tokens(0, 2)), a);
  pool.Release(a);  // the lookup's reference
  pool.Release(b);
  pool.Release(a);
  // Both unreferenced but published: still free to allocate, still found.
  EXPECT_EQ(pool.free_blocks(), 3);
  EXPECT_EQ(pool.Lookup(-1, Tokens(0, 2)), a);
  pool.Release(a);  // now released after b
  // The never-used block goes first, then b (released least recently), then a.
  const int32_t fresh = pool.Allocate();
  EXPECT_NE(fresh, a);
  EXPECT_NE(fresh, b);
  EXPECT_EQ(pool.Allocate(), b);
  EXPECT_EQ(pool.Lookup(a, Tokens(2, 2)), -1) << "b was evicted";
  EXPECT_EQ(pool.Lookup(-1, Tokens(0, 2)), a);
  pool.Publish(a, Tokens(4, 2), b);  // b again, now after a
  pool.Release(a);
  EXPECT_EQ(pool.Allocate(), a);
  EXPECT_EQ(pool.Lookup(-1, Tokens(0, 2)), -1) << "a was evicted";
  // b, published under a's old contents, never matches a's new ones.
  pool.Publish(-1, Tokens(0, 2), a);
  EXPECT_EQ(pool.Lookup(a, Tokens(4, 2)), -1);
}

TEST(KvBlockPoolTest, KeepsAtMostMaxCachedBlocksAndReusesThemFirst) {
  auto created = KvBlockPool::Create(SmallShape(2), 8, /*max_cached_blocks=*/2);
  ASSERT_TRUE(created.ok());
  KvBlockPool& pool = **created;
  std::vector<int32_t> blocks;
  for (int i = 0; i < 3; ++i) {
    blocks.push_back(pool.Allocate());
    pool.Publish(i == 0 ? -1 : blocks[i - 1], Tokens(2 * i, 2), blocks.back());
  }
  EXPECT_EQ(pool.touched_blocks(), 3);
  for (int32_t block : blocks) pool.Release(block);
  // The first released went back to the free blocks, unpublished; the two others are cached.
  EXPECT_EQ(pool.cached_blocks(), 2);
  EXPECT_EQ(pool.free_blocks(), 8);
  EXPECT_EQ(pool.Lookup(-1, Tokens(0, 2)), -1) << "evicted beyond the cap";
  EXPECT_EQ(pool.Lookup(blocks[1], Tokens(4, 2)), blocks[2]) << "cached";
  pool.Release(blocks[2]);
  EXPECT_EQ(pool.Allocate(), blocks[0]) << "a released block is handed out before a fresh one";
  EXPECT_EQ(pool.touched_blocks(), 3);
}

TEST(BlockTableTest, ReservesInWholeBlocksAndPublishesFullOnes) {
  auto pool = KvBlockPool::Create(SmallShape(4), 4);
  ASSERT_TRUE(pool.ok());
  {
    BlockTable table(pool->get(), /*share_prefixes=*/true);
    EXPECT_EQ(table.BlocksFor(9), 3);
    ASSERT_TRUE(table.Reserve(9));
    EXPECT_EQ(table.capacity(), 12);
    EXPECT_FALSE(table.Reserve(20)) << "needs 5 blocks of 4";
    EXPECT_EQ(table.capacity(), 12) << "a failed reservation allocates nothing";
    table.Commit(Tokens(0, 9));
  }
  // Two full blocks were published; the third, partial, was not.
  BlockTable again(pool->get(), true);
  EXPECT_EQ(again.ReusePrefix(Tokens(0, 12)), 8);
  BlockTable shorter(pool->get(), true);
  EXPECT_EQ(shorter.ReusePrefix(Tokens(0, 8)), 4) << "the last token is always computed";
  BlockTable private_table(pool->get(), /*share_prefixes=*/false);
  EXPECT_EQ(private_table.ReusePrefix(Tokens(0, 12)), 0);
}

class DemoDecodingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = LoadModel(kDemo);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }
  const CausalLM& lm() const { return *model_->As<CausalLM>(); }
  std::unique_ptr<KvBlockPool> Pool(int64_t block_tokens, int64_t blocks,
                                    KvCacheType type = KvCacheType::kFloat32) const {
    KvBlockShape shape = *lm().CacheShape(block_tokens);
    shape.type = type;
    auto pool = KvBlockPool::Create(shape, blocks);
    EXPECT_TRUE(pool.ok()) << pool.status();
    return *std::move(pool);
  }
  static std::vector<int64_t> RandomTokens(int64_t count, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int64_t> tokens(count);
    for (auto& t : tokens) t = static_cast<int64_t>(rng() % 256);
    return tokens;
  }
  // Feeds `feed` to the state in chunks of `chunk` tokens, reserving as it goes; the logits
  // after the last.
  Tensor Feed(DecoderState& state, const std::vector<int64_t>& feed, int64_t chunk) const {
    Tensor logits;
    DecoderState* pointer = &state;
    for (size_t i = 0; i < feed.size(); i += chunk) {
      const size_t end = std::min(feed.size(), i + chunk);
      EXPECT_TRUE(state.table->Reserve(state.position + static_cast<int64_t>(end - i)));
      auto step =
          lm().Advance({&pointer, 1}, {std::vector<int64_t>(feed.begin() + i, feed.begin() + end)});
      EXPECT_TRUE(step.ok()) << step.status();
      logits = *std::move(step);
    }
    return logits;
  }
  static float MaxDifference(const Tensor& a, const Tensor& b) {
    float most = 0.0f;
    for (int64_t i = 0; i < a.size(); ++i)
      most = std::max(most, std::abs(a.data()[i] - b.data()[i]));
    return most;
  }
  std::unique_ptr<Model> model_;
};

TEST_F(DemoDecodingTest, ChunkedPrefillOverSmallBlocksEqualsTheFullPass) {
  const std::vector<int64_t> tokens = RandomTokens(100, 1);
  auto full = lm().Logits({tokens});
  ASSERT_TRUE(full.ok());
  for (int64_t block_tokens : {1, 3, 32}) {
    for (int64_t chunk : {1, 7, 100}) {
      auto pool = Pool(block_tokens, 200);
      auto state = lm().NewState(pool.get());
      const Tensor logits = Feed(*state, tokens, chunk);
      const Tensor expected = full->Select(0).Slice(0, 99, 1);
      EXPECT_LT(MaxDifference(logits, expected), 1e-4)
          << block_tokens << " tokens per block, chunks of " << chunk;
    }
  }
}

// A two-byte cache keeps 11 (half) or 8 (bfloat16) significant bits of each key and value: the
// logits move by what that rounding costs, far less than the logits' spread, half's less than
// bfloat16's, and decoding over it matches the pass over the whole sequence (which caches nothing)
// as closely.
TEST_F(DemoDecodingTest, TwoByteCachesStayCloseToTheFullPass) {
  const std::vector<int64_t> tokens = RandomTokens(300, 7);
  auto full = lm().Logits({tokens});
  ASSERT_TRUE(full.ok());
  const Tensor expected = full->Select(0).Slice(0, 299, 1);
  const auto difference = [&](KvCacheType type) {
    auto pool = Pool(32, 20, type);
    auto state = lm().NewState(pool.get());
    return MaxDifference(Feed(*state, tokens, 64), expected);
  };
  EXPECT_EQ(2 * Pool(32, 1, KvCacheType::kF16)->shape().BlockBytes(),
            Pool(32, 1)->shape().BlockBytes());
  const float float32 = difference(KvCacheType::kFloat32), f16 = difference(KvCacheType::kF16),
              bf16 = difference(KvCacheType::kBf16);
  std::cout << "largest logit difference: float32 cache " << float32 << ", f16 " << f16 << ", bf16 "
            << bf16 << "\n";
  EXPECT_GT(f16, float32) << "the cache is really f16";
  EXPECT_GT(bf16, f16);
  EXPECT_LT(f16, 2e-3);
  EXPECT_LT(bf16, 2e-2);
}

TEST_F(DemoDecodingTest, AReusedPrefixGivesWhatAFreshComputationGives) {
  // A 900-token shared prefix: the first sequence publishes it, the second reuses its blocks.
  const std::vector<int64_t> prefix = RandomTokens(900, 2);
  std::vector<int64_t> first = prefix, second = prefix;
  for (int64_t t : RandomTokens(20, 3)) first.push_back(t);
  for (int64_t t : RandomTokens(20, 4)) second.push_back(t);
  auto pool = Pool(32, 64);
  auto publisher = lm().NewState(pool.get());
  Feed(*publisher, first, 512);
  publisher.reset();  // released, still published

  auto reuser = lm().NewState(pool.get());
  EXPECT_EQ(reuser->ReusePrefix(second), 896);
  EXPECT_EQ(reuser->position, 896);
  std::vector<int64_t> rest(second.begin() + 896, second.end());
  const Tensor warm = Feed(*reuser, rest, 512);

  auto fresh_pool = Pool(32, 64);
  auto fresh = lm().NewState(fresh_pool.get());
  const Tensor cold = Feed(*fresh, second, 512);
  EXPECT_LT(MaxDifference(warm, cold), 1e-6);

  // And decoding on from both stays equal.
  for (int step = 0; step < 5; ++step) {
    const std::vector<int64_t> next = {static_cast<int64_t>(step * 31 % 256)};
    EXPECT_LT(MaxDifference(Feed(*reuser, next, 1), Feed(*fresh, next, 1)), 1e-6);
  }
}

TEST_F(DemoDecodingTest, AResetStateStartsOverAndFreesItsBlocks) {
  auto pool = Pool(8, 20);
  auto state = lm().NewState(pool.get());
  const std::vector<int64_t> tokens = RandomTokens(50, 5);
  const Tensor before = Feed(*state, tokens, 50);
  EXPECT_EQ(pool->used_blocks(), 7);
  state->Reset();
  EXPECT_EQ(state->position, 0);
  EXPECT_EQ(pool->used_blocks(), 0);
  EXPECT_EQ(state->ReusePrefix(tokens), 48) << "its full blocks stay published";
  const Tensor after = Feed(*state, std::vector<int64_t>(tokens.begin() + 48, tokens.end()), 2);
  // Fed in other chunks than before, so matmul rounding may differ in the last digits.
  EXPECT_LT(MaxDifference(before, after), 1e-5);
}

TEST_F(DemoDecodingTest, AdvanceRefusesTokensBeyondTheReservedBlocks) {
  auto pool = Pool(4, 2);
  auto state = lm().NewState(pool.get());
  ASSERT_TRUE(state->table->Reserve(8));
  DecoderState* pointer = state.get();
  auto logits = lm().Advance({&pointer, 1}, {RandomTokens(9, 6)});
  ASSERT_FALSE(logits.ok());
  EXPECT_EQ(logits.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(state->position, 0);
}

}  // namespace
}  // namespace attnserve
