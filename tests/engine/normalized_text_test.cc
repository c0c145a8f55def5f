// NormalizedText against cases checked on the reference (text/tokenizer/REFERENCE.md §2-4):
// what each edit does to the text and to the byte ranges of the input each byte came from.
#include "text/tokenizer/normalized_text.h"

#include <gtest/gtest.h>

#include "text/tokenizer/split.h"

namespace attnserve {
namespace {

std::vector<ByteRange> Repeat(std::initializer_list<std::pair<ByteRange, int>> runs) {
  std::vector<ByteRange> out;
  for (const auto& [range, count] : runs) out.insert(out.end(), count, range);
  return out;
}

// NFD reorders marks by combining class; alignments stay with positions: a ◌́ ◌̖ becomes
// a ◌̖ ◌́, the second char aligned with the second char of the input.
TEST(NormalizedTextTest, DecompositionReordersMarksAndKeepsPositions) {
  NormalizedText text("a\u0301\u0316");
  text.Normalize(NormalizedText::Form::kNfd);
  EXPECT_EQ(text.normalized(), "a\u0316\u0301");
  EXPECT_EQ(text.alignments(), Repeat({{{0, 1}, 1}, {{1, 3}, 2}, {{3, 5}, 2}}));
}

// A composed char is aligned with its first source char only.
TEST(NormalizedTextTest, CompositionAlignsWithTheStarter) {
  NormalizedText text("e\u0301x");
  text.Normalize(NormalizedText::Form::kNfc);
  EXPECT_EQ(text.normalized(), "\u00e9x");
  EXPECT_EQ(text.alignments(), Repeat({{{0, 1}, 2}, {{3, 4}, 1}}));
  EXPECT_EQ(text.ToOriginal({0, 2}), (ByteRange{0, 1}));
  NormalizedText ligature("\ufb01");  // ﬁ: NFKC gives f, i, both aligned with it
  ligature.Normalize(NormalizedText::Form::kNfkc);
  EXPECT_EQ(ligature.normalized(), "fi");
  EXPECT_EQ(ligature.alignments(), Repeat({{{0, 3}, 2}}));
}

TEST(NormalizedTextTest, LowercaseIsFullAndPerChar) {
  NormalizedText text("\u0130\u03a3");  // İ Σ: "i̇" and σ (no final-sigma rule)
  text.Lowercase();
  EXPECT_EQ(text.normalized(), "i\u0307\u03c3");
  EXPECT_EQ(text.alignments(), Repeat({{{0, 2}, 3}, {{2, 4}, 2}}));
}

TEST(NormalizedTextTest, FilterPrependAndStrip) {
  NormalizedText text(
      "\x01"
      "ab\x02");
  text.Filter([](char32_t c) { return c >= ' '; });
  EXPECT_EQ(text.normalized(), "ab");
  EXPECT_EQ(text.alignments(), Repeat({{{1, 2}, 1}, {{2, 3}, 1}}));
  text.Prepend("\u2581");  // ▁ and the first char share the first char's alignment
  EXPECT_EQ(text.normalized(), "\u2581ab");
  EXPECT_EQ(text.alignments(), Repeat({{{1, 2}, 4}, {{2, 3}, 1}}));
  NormalizedText spaced("  x y \t");
  spaced.Strip(true, true);
  EXPECT_EQ(spaced.normalized(), "x y");
  EXPECT_EQ(spaced.ToOriginal({0, 3}), (ByteRange{2, 5}));
}

TEST(NormalizedTextTest, ReplacementsAlignWithTheMatchsLastByte) {
  NormalizedText text("a b");
  text.Replace({{1, 2}}, "\u2581\u2581");
  EXPECT_EQ(text.normalized(), "a\u2581\u2581b");
  EXPECT_EQ(text.alignments(), Repeat({{{0, 1}, 1}, {{1, 2}, 6}, {{2, 3}, 1}}));
}

TEST(NormalizedTextTest, SlicesKeepTheirPlaceInTheInput) {
  NormalizedText text("xy\u00e9z");
  text.Normalize(NormalizedText::Form::kNfd);  // x y e ◌́ z
  const std::optional<NormalizedText> slice = text.Slice({2, 5});
  ASSERT_TRUE(slice.has_value());
  EXPECT_EQ(slice->normalized(), "e\u0301");
  EXPECT_EQ(slice->original(), "\u00e9");
  EXPECT_EQ(slice->original_shift(), 2u);
  EXPECT_EQ(slice->ToOriginal({0, 1}), (ByteRange{0, 2}));
  EXPECT_FALSE(text.Slice({3, 4}).has_value());  // inside a char
}

// Split("-") on the-final--countdown- with each behaviour, as the reference splits it.
TEST(SplitTest, EveryBehaviour) {
  const NormalizedText text("the-final--countdown-");
  const auto parts = [&](SplitBehavior behavior) {
    std::vector<std::string> out;
    for (const NormalizedText& part : Split(
             text, CharPieces(text.normalized(), [](char32_t c) { return c == '-'; }), behavior)) {
      if (!part.normalized().empty()) out.push_back(part.normalized());
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(parts(SplitBehavior::kRemoved), (V{"the", "final", "countdown"}));
  EXPECT_EQ(parts(SplitBehavior::kIsolated), (V{"the", "-", "final", "-", "-", "countdown", "-"}));
  EXPECT_EQ(parts(SplitBehavior::kMergedWithPrevious), (V{"the-", "final-", "-", "countdown-"}));
  EXPECT_EQ(parts(SplitBehavior::kMergedWithNext), (V{"the", "-final", "-", "-countdown", "-"}));
  EXPECT_EQ(parts(SplitBehavior::kContiguous), (V{"the", "-", "final", "--", "countdown", "-"}));
}

}  // namespace
}  // namespace attnserve
