// TokenizerJsonFromGguf on small metadata: what it builds, and what it refuses (with the file and
// the key named). gguf_tokenizer_reference_test.py checks real vocabularies against the reference.
#include "text/tokenizer/gguf_tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "text/tokenizer/hf_tokenizer.h"

namespace attnserve {
namespace {

using nlohmann::json;

const std::string kPath = "/models/x.gguf";

// A byte-level vocabulary: "a", "b", "ab", "Ġ" (a space), "Ġab" and a control token.
json Gpt2() {
  return {{"tokenizer.ggml.model", "gpt2"},
          {"tokenizer.ggml.pre", "gpt-2"},
          {"tokenizer.ggml.tokens",
           {"a", "b", "ab", "\xC4\xA0",
            "\xC4\xA0"
            "ab",
            "<|end|>"}},
          {"tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 3}},
          {"tokenizer.ggml.merges", {"a b", "\xC4\xA0 ab"}},
          {"tokenizer.ggml.eos_token_id", 5}};
}

// A SentencePiece vocabulary: <unk>, <s>, </s>, two byte tokens, pieces and their scores.
json Llama() {
  return {{"tokenizer.ggml.model", "llama"},
          {"tokenizer.ggml.tokens",
           {"<unk>", "<s>", "</s>", "<0x0A>", "<0x21>", "\xE2\x96\x81", "a", "b", "ab",
            "\xE2\x96\x81"
            "a",
            "\xE2\x96\x81"
            "ab"}},
          {"tokenizer.ggml.scores", {0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0}},
          {"tokenizer.ggml.token_type", {2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1}}};
}

HfTokenizer Load(const json& metadata) {
  absl::StatusOr<std::string> text = TokenizerJsonFromGguf(metadata, kPath);
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<HfTokenizer> tokenizer = HfTokenizer::FromJson(text.value_or("{}"), kPath);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return *std::move(tokenizer);
}

std::vector<int64_t> Ids(const HfTokenizer& tokenizer, const std::string& text) {
  absl::StatusOr<Encoding> encoding = tokenizer.Encode(text);
  EXPECT_TRUE(encoding.ok()) << encoding.status();
  return encoding.ok() ? encoding->ids : std::vector<int64_t>{};
}

TEST(GgufTokenizerTest, Gpt2VocabularyWithMergesAndControlTokens) {
  const HfTokenizer tokenizer = Load(Gpt2());
  EXPECT_EQ(Ids(tokenizer, "ab ab<|end|>"), (std::vector<int64_t>{2, 4, 5}));
  EXPECT_EQ(*tokenizer.Decode({2, 4, 5}), "ab ab<|end|>");
  EXPECT_EQ(*tokenizer.Decode({2, 4, 5}, /*skip_special_tokens=*/true), "ab ab");
  // No BOS by default for gpt2 vocabularies; with add_bos_token, the BOS id comes first.
  json metadata = Gpt2();
  metadata["tokenizer.ggml.add_bos_token"] = true;
  metadata["tokenizer.ggml.add_eos_token"] = true;
  metadata["tokenizer.ggml.bos_token_id"] = 5;
  EXPECT_EQ(Ids(Load(metadata), "ab"), (std::vector<int64_t>{5, 2, 5}));
}

TEST(GgufTokenizerTest, DuplicateMergesKeepTheirFirstRank) {
  // "b c" before "a b" makes "abc" "a", "bc"; a second "b c" after "a b" changes nothing.
  const json metadata = {{"tokenizer.ggml.model", "gpt2"},
                         {"tokenizer.ggml.pre", "gpt-2"},
                         {"tokenizer.ggml.tokens", {"a", "b", "c", "ab", "bc"}},
                         {"tokenizer.ggml.merges", {"b c", "a b", "b c"}}};
  EXPECT_EQ(Ids(Load(metadata), "abc"), (std::vector<int64_t>{0, 4}));
}

TEST(GgufTokenizerTest, LlamaVocabularyDerivesMergesFromScores) {
  const HfTokenizer tokenizer = Load(Llama());
  // BOS by default, "▁" before the text, "▁ab" by the merges "▁ a" then "▁a b", "!" by its byte.
  EXPECT_EQ(Ids(tokenizer, "ab!"), (std::vector<int64_t>{1, 10, 4}));
  EXPECT_EQ(Ids(tokenizer, "b\n"), (std::vector<int64_t>{1, 5, 7, 3}));
  EXPECT_EQ(*tokenizer.Decode({1, 10, 4}, /*skip_special_tokens=*/true), "ab!");
  // Merges ranked by the merged token's score, then the longer left part first: "▁a b" before
  // "▁ ab". "ab!" above took "a b" (-4) first, then "▁ ab".
  const json written = json::parse(*TokenizerJsonFromGguf(Llama(), kPath));
  EXPECT_EQ(written["model"]["merges"],
            json::parse(R"([["a","b"],["▁","a"],["▁a","b"],["▁","ab"]])"));
  EXPECT_EQ(written["model"]["unk_token"], "<unk>");
}

TEST(GgufTokenizerTest, LlamaFlags) {
  json metadata = Llama();
  metadata["tokenizer.ggml.add_bos_token"] = false;
  metadata["tokenizer.ggml.add_eos_token"] = true;
  metadata["tokenizer.ggml.add_space_prefix"] = false;
  const HfTokenizer tokenizer = Load(metadata);
  EXPECT_EQ(Ids(tokenizer, "ab"), (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(Ids(tokenizer, " ab"), (std::vector<int64_t>{10, 2}));
  EXPECT_EQ(*tokenizer.Decode({10, 2}), " ab</s>");
}

TEST(GgufTokenizerTest, EmptyTokensAreNamedAsLlamaCppNamesThem) {
  json metadata = Gpt2();
  metadata["tokenizer.ggml.tokens"][1] = "";
  metadata["tokenizer.ggml.merges"] = json::array();
  const json written = json::parse(*TokenizerJsonFromGguf(metadata, kPath));
  EXPECT_EQ(written["model"]["vocab"]["[EMPTY_1]"], 1);
}

// The error for `metadata`, which must name the file and `fragment`.
void ExpectRefused(const json& metadata, const std::string& fragment) {
  absl::StatusOr<std::string> text = TokenizerJsonFromGguf(metadata, kPath);
  ASSERT_FALSE(text.ok()) << fragment;
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(text.status().message(), kPath)) << text.status();
  EXPECT_TRUE(absl::StrContains(text.status().message(), fragment)) << text.status();
}

json With(json metadata, const std::string& key, json value) {
  if (value.is_discarded()) {
    metadata.erase(key);
  } else {
    metadata[key] = std::move(value);
  }
  return metadata;
}
const json kAbsent = json(json::value_t::discarded);

TEST(GgufTokenizerTest, RefusesUnsupportedModelsAndPreTokenizers) {
  ExpectRefused(json::array(), "metadata is not an object");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.model", kAbsent), "tokenizer.ggml.model: is missing");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.model", 3), "tokenizer.ggml.model: a string");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.model", "bert"),
                "tokenizer.ggml.model: \"bert\" is not supported; supported: \"gpt2\"");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.pre", kAbsent),
                "tokenizer.ggml.pre: is missing; supported for gpt2 vocabularies: gpt-2, smollm");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.pre", "default"),
                "tokenizer.ggml.pre: \"default\" is not supported; supported for gpt2 "
                "vocabularies: gpt-2, smollm, starcoder, llama3, llama-v3, llama-bpe, qwen2");
}

TEST(GgufTokenizerTest, RefusesBadTokens) {
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.tokens", kAbsent),
                "tokenizer.ggml.tokens: is missing");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.tokens", "a"), "tokenizer.ggml.tokens: an array");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.tokens", json::array()),
                "tokenizer.ggml.tokens: the vocabulary is empty");
  json tokens = Gpt2()["tokenizer.ggml.tokens"];
  tokens[1] = 7;
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.tokens", tokens), "tokenizer.ggml.tokens[1]: not a");
  tokens[1] = "b\xFF";
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.tokens", tokens),
                "tokenizer.ggml.tokens[1]: not valid UTF-8");
  tokens[1] = "a";
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.tokens", tokens),
                "tokenizer.ggml.tokens[1]: the same token as [0]");
}

TEST(GgufTokenizerTest, RefusesBadTokenTypes) {
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.token_type", {1, 1, 1}),
                "tokenizer.ggml.token_type: has 3 elements where tokenizer.ggml.tokens has 6");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.token_type", {1, 1, 1, 1, 9, 1}),
                "tokenizer.ggml.token_type[4]: not a token type");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.token_type", {1, 1, 1, 1, "x", 1}),
                "tokenizer.ggml.token_type[4]: not a token type");
}

TEST(GgufTokenizerTest, RefusesIdsOutsideTheVocabulary) {
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"}) {
    ExpectRefused(With(Gpt2(), key, 6), std::string(key) + ": the id is outside the vocabulary");
    ExpectRefused(With(Gpt2(), key, -1), std::string(key) + ": the id is outside the vocabulary");
    ExpectRefused(With(Gpt2(), key, std::numeric_limits<uint64_t>::max()),
                  std::string(key) + ": the id is outside the vocabulary");
    ExpectRefused(With(Gpt2(), key, "1"), std::string(key) + ": an integer token id");
    ExpectRefused(With(Gpt2(), key, 1.0), std::string(key) + ": an integer token id");
  }
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.add_bos_token", 1),
                "tokenizer.ggml.add_bos_token: a boolean is required");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.add_bos_token", true),
                "tokenizer.ggml.add_bos_token: BOS is added but tokenizer.ggml.bos_token_id is "
                "missing");
  ExpectRefused(With(With(Gpt2(), "tokenizer.ggml.eos_token_id", kAbsent),
                     "tokenizer.ggml.add_eos_token", true),
                "tokenizer.ggml.add_eos_token: EOS is added");
  // llama.cpp's default BOS (1) for a llama vocabulary is only taken where the vocabulary has it.
  const json one_token = {{"tokenizer.ggml.model", "llama"},
                          {"tokenizer.ggml.tokens", {"a"}},
                          {"tokenizer.ggml.scores", {0.0}}};
  ExpectRefused(one_token, "tokenizer.ggml.add_bos_token: BOS is added");
  EXPECT_TRUE(
      TokenizerJsonFromGguf(With(one_token, "tokenizer.ggml.add_bos_token", false), kPath).ok());
}

TEST(GgufTokenizerTest, RefusesBadMerges) {
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.merges", kAbsent),
                "tokenizer.ggml.merges: is missing");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.merges", {"a b", 3}),
                "tokenizer.ggml.merges[1]: not a string");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.merges", {"ab"}),
                "tokenizer.ggml.merges[0]: \"left right\" is required");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.merges", {"a c"}),
                "tokenizer.ggml.merges[0]: its right part is not a token");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.merges", {"a b", "x b"}),
                "tokenizer.ggml.merges[1]: its left part is not a token");
  ExpectRefused(With(Gpt2(), "tokenizer.ggml.merges", {"b a"}),
                "tokenizer.ggml.merges[0]: the merged token is not a token");
}

TEST(GgufTokenizerTest, RefusesBadScores) {
  ExpectRefused(With(Llama(), "tokenizer.ggml.scores", kAbsent),
                "tokenizer.ggml.scores: is missing");
  ExpectRefused(With(Llama(), "tokenizer.ggml.scores", {0.0}),
                "tokenizer.ggml.scores: has 1 elements where tokenizer.ggml.tokens has 11");
  json scores = Llama()["tokenizer.ggml.scores"];
  scores[7] = std::nan("");
  ExpectRefused(With(Llama(), "tokenizer.ggml.scores", scores),
                "tokenizer.ggml.scores[7]: not a finite number");
  scores[7] = "x";
  ExpectRefused(With(Llama(), "tokenizer.ggml.scores", scores),
                "tokenizer.ggml.scores[7]: not a finite number");
  ExpectRefused(With(Llama(), "tokenizer.ggml.add_space_prefix", "yes"),
                "tokenizer.ggml.add_space_prefix: a boolean is required");
}

}  // namespace
}  // namespace attnserve
