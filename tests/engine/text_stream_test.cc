#include "engine/tokenizer/text_stream.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_tokenizer.h"

namespace attnserve {
namespace {

const ByteTokenizer kTokenizer({{"<|endoftext|>", 256}});

TEST(TextStreamTest, HoldsBackBytesUntilTheyMakeACharacter) {
  TextStream stream(kTokenizer, {'h', 'i'});
  // "日" arrives byte by byte and comes out whole.
  EXPECT_EQ(stream.Push(0xE6), "");
  EXPECT_EQ(stream.Push(0x97), "");
  EXPECT_EQ(stream.Push(0xA5), "\xE6\x97\xA5");
  EXPECT_EQ(stream.Push('!'), "!");
  // A special token comes by name.
  EXPECT_EQ(stream.Push(256), "<|endoftext|>");
  EXPECT_EQ(stream.text(), "\xE6\x97\xA5!<|endoftext|>");
  EXPECT_EQ(stream.Finish(), "");
}

TEST(TextStreamTest, BytesThatNeverMakeACharacterAreSentAsReplacements) {
  TextStream stream(kTokenizer, {});
  // 0xCB leads a two-byte character that 0xD3 does not continue; 0xD3 leads "Ӣ" with 0xA2.
  std::string streamed = stream.Push(0xCB);
  streamed += stream.Push(0xD3);
  streamed += stream.Push(0xA2);
  EXPECT_EQ(streamed, "\xEF\xBF\xBD\xD3\xA2");
  // Bytes that never make a character are sent with the next text.
  EXPECT_EQ(stream.Push(0xFF) + stream.Push(0xFF) + stream.Push(0xFF), "");
  EXPECT_EQ(stream.Push('x'), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx");
  // Not held forever: at the 16th token held, the bytes of all but the last three are decided.
  std::string held;
  for (int i = 0; i < 15; ++i) held += stream.Push(0xFF);
  EXPECT_EQ(held, "");
  std::string thirteen;
  for (int i = 0; i < 13; ++i) thirteen += "\xEF\xBF\xBD";
  EXPECT_EQ(stream.Push(0xFF), thirteen);
}

TEST(TextStreamTest, TokensHeldTooLongStillAddUpToTheDecodedText) {
  // Stray continuation bytes, then one that leads "߇" as the 16th held token (found by fuzzing:
  // sending its U+FFFD at once would have made the pieces differ from the decoded text).
  std::vector<int64_t> ids(15, 0x87);
  ids.push_back(0xDF);
  ids.push_back(0x87);
  ids.push_back(0xE6);
  TextStream stream(kTokenizer, {});
  std::string streamed;
  for (int64_t id : ids) streamed += stream.Push(id);
  streamed += stream.Finish();
  EXPECT_EQ(streamed, *kTokenizer.Decode(ids));
}

TEST(TextStreamTest, FinishSendsAnIncompleteCharacterAsAReplacement) {
  TextStream stream(kTokenizer, {});
  EXPECT_EQ(stream.Push('a'), "a");
  EXPECT_EQ(stream.Push(0xE6), "");
  EXPECT_EQ(stream.Finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.text(), "a\xEF\xBF\xBD");
}

TEST(TextStreamTest, APromptEndingInsideACharacterGivesNoContext) {
  // Context that ends in half a character would make the first piece start mid-character.
  TextStream stream(kTokenizer, {'a', 0xE6});
  EXPECT_EQ(stream.Push(0x97), "");
  EXPECT_EQ(stream.Push('b'),
            "\xEF\xBF\xBD"
            "b");
}

}  // namespace
}  // namespace attnserve
