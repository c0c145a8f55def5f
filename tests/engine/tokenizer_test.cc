#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "text/tokenizer/byte_tokenizer.h"
#include "text/tokenizer/word_cache.h"

namespace attnserve {
namespace {

const ByteTokenizer kTokenizer({{"<|endoftext|>", 256}, {"<pad>", 257}});

TEST(ByteTokenizerTest, EncodesUtf8BytesAndRoundTrips) {
  const std::string text = "naïve café — 東京";
  const std::vector<int64_t> ids = *kTokenizer.EncodeIds(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[2], 0xC3);  // first byte of ï
  const Encoding encoding = *kTokenizer.Encode(text);
  EXPECT_EQ(encoding.ids, ids);
  EXPECT_EQ(encoding.tokens[2], "<0xC3>");
  EXPECT_EQ(encoding.offsets[2], (ByteRange{2, 3}));
  auto decoded = kTokenizer.Decode(ids);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, text);
}

TEST(ByteTokenizerTest, SpecialTokensDecodeToTheirText) {
  auto decoded = kTokenizer.Decode({'h', 'i', 256, 'x', 257});
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, "hi<|endoftext|>x<pad>");
  EXPECT_EQ(*kTokenizer.Decode({'h', 'i', 256, 'x', 257}, /*skip_special_tokens=*/true), "hix");
  EXPECT_EQ(kTokenizer.TokenToId("<pad>"), 257);
  EXPECT_EQ(kTokenizer.TokenToId("<nope>"), -1);
  EXPECT_EQ(kTokenizer.TokenText(256), "<|endoftext|>");
  EXPECT_EQ(kTokenizer.TokenText('A'), "A");
  EXPECT_EQ(kTokenizer.TokenText(0xE6), "<0xE6>");
  EXPECT_EQ(kTokenizer.vocab_size(), 258);
}

TEST(ByteTokenizerTest, InvalidUtf8BecomesReplacementCharacters) {
  // A character cut in half, a lone continuation byte, an overlong '/' and a surrogate.
  auto decoded = kTokenizer.Decode({0xE6, 0x9D, 'a', 0x80, 0xC0, 0xAF, 0xED, 0xA0, 0x80});
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(absl::StartsWith(*decoded,
                               "\xEF\xBF\xBD\xEF\xBF\xBD"
                               "a\xEF\xBF\xBD"))
      << *decoded;
  EXPECT_EQ(SanitizeUtf8("ok \xF0\x9F\x98\x80"), "ok \xF0\x9F\x98\x80");  // a valid emoji stays
}

TEST(ByteTokenizerTest, UnknownIdsAreErrorsThatNameThem) {
  auto decoded = kTokenizer.Decode({'a', 300});
  ASSERT_FALSE(decoded.ok());
  EXPECT_TRUE(absl::StrContains(decoded.status().message(), "token id 300 at position 1"));
  EXPECT_FALSE(kTokenizer.Decode({-1}).ok());
  EXPECT_EQ(kTokenizer.TokenText(258), "<258>");
}

TEST(ByteTokenizerTest, IncompleteCharacterTokensAreThoseMoreBytesCouldComplete) {
  const ByteTokenizer tokenizer({{"<|endoftext|>", 256}});
  using Ids = std::vector<int64_t>;
  EXPECT_EQ(0u, tokenizer.IncompleteCharacterTokens(Ids{}));
  EXPECT_EQ(0u, tokenizer.IncompleteCharacterTokens(Ids{'a'}));
  EXPECT_EQ(1u, tokenizer.IncompleteCharacterTokens(Ids{'a', 0xE6}));
  EXPECT_EQ(2u, tokenizer.IncompleteCharacterTokens(Ids{0xE6, 0x97}));
  EXPECT_EQ(0u, tokenizer.IncompleteCharacterTokens(Ids{0xE6, 0x97, 0xA5}));
  EXPECT_EQ(3u, tokenizer.IncompleteCharacterTokens(Ids{0xF0, 0x9F, 0x98}));
  EXPECT_EQ(1u, tokenizer.IncompleteCharacterTokens(Ids{0xF3, 0xF3}));  // a new one begins
  EXPECT_EQ(0u, tokenizer.IncompleteCharacterTokens(Ids{0xFF}));        // begins nothing
  EXPECT_EQ(0u, tokenizer.IncompleteCharacterTokens(Ids{0x87}));        // continues nothing
  EXPECT_EQ(0u, tokenizer.IncompleteCharacterTokens(Ids{0xE0, 0x80}));  // overlong: cannot follow
  EXPECT_EQ(0u, tokenizer.IncompleteCharacterTokens(Ids{0xC3, 0xA9, 0x87}));
  EXPECT_EQ(0u, tokenizer.IncompleteCharacterTokens(Ids{0xE6, 256}));  // a special token ends it
}

TEST(WordCacheTest, FindsWhatWasInsertedAndAppendsIt) {
  WordCache cache;
  std::vector<WordCache::Piece> pieces = {{7, 1}};
  EXPECT_FALSE(cache.Find("hello", pieces));
  cache.Insert("hello", {{3, 2}, {4, 3}});
  ASSERT_TRUE(cache.Find("hello", pieces));
  ASSERT_EQ(3u, pieces.size());
  EXPECT_EQ(7, pieces[0].id);
  EXPECT_EQ(3, pieces[1].id);
  EXPECT_EQ(4, pieces[2].id);
  EXPECT_EQ(3u, pieces[2].bytes);
}

TEST(WordCacheTest, KeepsNoMoreWordsAndBytesThanItsCapacity) {
  WordCache cache;
  std::vector<WordCache::Piece> pieces;
  const std::string too_long(WordCache::kMaxBytes, 'a');
  cache.Insert(too_long, {{1, static_cast<uint32_t>(too_long.size())}});
  EXPECT_FALSE(cache.Find(too_long, pieces));
  const std::string half(WordCache::kMaxBytes / 2, 'b');
  cache.Insert(half, {{1, static_cast<uint32_t>(half.size())}});
  EXPECT_TRUE(cache.Find(half, pieces));
  cache.Insert(half + "c", {{1, static_cast<uint32_t>(half.size() + 1)}});
  EXPECT_FALSE(cache.Find(half + "c", pieces));  // the two would pass kMaxBytes

  WordCache full;
  for (size_t i = 0; i < WordCache::kCapacity; ++i) full.Insert(std::to_string(i), {{1, 1}});
  EXPECT_TRUE(full.Find(std::to_string(WordCache::kCapacity - 1), pieces));
  full.Insert("one more", {{1, 8}});
  EXPECT_FALSE(full.Find("one more", pieces));
}

}  // namespace
}  // namespace attnserve
