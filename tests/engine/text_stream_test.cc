#include "text/tokenizer/text_stream.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "text/tokenizer/byte_tokenizer.h"
#include "text/tokenizer/hf_tokenizer.h"

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
  // A byte that begins no character is sent at once.
  EXPECT_EQ(stream.Push(0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.Push(0x87), "\xEF\xBF\xBD");
}

TEST(TextStreamTest, StrayBytesBeforeACharacterAddUpToTheDecodedText) {
  // Stray continuation bytes, then "߇" (found by fuzzing: a stream that sent its lead byte as
  // U+FFFD after holding 16 tokens differed from the decoded text).
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

// A byte-fallback BPE as Llama 2's: "a" and the 256 byte tokens.
HfTokenizer ByteFallbackTokenizer() {
  nlohmann::json vocab = {{"<unk>", 0}, {"a", 1}};
  for (int b = 0; b < 256; ++b) vocab[absl::StrFormat("<0x%02X>", b)] = 2 + b;
  const nlohmann::json config = {
      {"version", "1.0"},
      {"decoder",
       {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", nlohmann::json::array()}}}};
  return *HfTokenizer::FromJson(config.dump(), "test.json");
}

TEST(TextStreamTest, ALiteralReplacementCharacterIsNotHeld) {
  const HfTokenizer tokenizer = ByteFallbackTokenizer();
  const auto byte = [](int b) -> int64_t { return 2 + b; };
  EXPECT_EQ(tokenizer.IncompleteCharacterTokens({1, byte(0xEF), byte(0xBF)}), 2u);
  EXPECT_EQ(tokenizer.IncompleteCharacterTokens({byte(0xEF), byte(0xBF), byte(0xBD)}), 0u);
  EXPECT_EQ(tokenizer.IncompleteCharacterTokens({byte(0xE6), 0, byte(0x97)}), 0u);  // <unk> between
  TextStream stream(tokenizer, {});
  EXPECT_EQ(stream.Push(byte(0xEF)), "");
  EXPECT_EQ(stream.Push(byte(0xBF)), "");
  EXPECT_EQ(stream.Push(byte(0xBD)), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.Push(1), "a");
}

TEST(TextStreamTest, TextTheDecoderChangesIsHeldAtMostSixteenTokens) {
  const HfTokenizer tokenizer = ByteFallbackTokenizer();
  const auto byte = [](int b) -> int64_t { return 2 + b; };
  TextStream stream(tokenizer, {});
  EXPECT_EQ(stream.Push(byte(0xC3)), "");
  EXPECT_EQ(stream.Push(byte(0xA9)), "\xC3\xA9");
  // A stray byte makes the run invalid: ByteFallback now decodes "é" as two U+FFFDs.
  std::string held;
  for (int i = 0; i < 15; ++i) held += stream.Push(byte(0x87));
  EXPECT_EQ(held, "");
  const std::string piece = stream.Push(byte(0x87));
  EXPECT_EQ(piece, *tokenizer.Decode(std::vector<int64_t>(18, byte(0x87))));
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
  // Alone, the character's second byte begins nothing.
  EXPECT_EQ(stream.Push(0x97), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.Push('b'), "b");
}

}  // namespace
}  // namespace attnserve
