// Structured outputs (text/structured/): GBNF read as llama.cpp reads it, constraints compiled
// over a vocabulary, and answers drawn at random from the allowed tokens, which always complete
// their constraint.
#include <gtest/gtest.h>

#include <random>

#include "absl/strings/match.h"
#include "nlohmann/json.hpp"
#include "text/structured/constraint_compiler.h"
#include "text/structured/gbnf_to_lark.h"
#include "text/tokenizer/byte_tokenizer.h"

namespace attnserve::structured {
namespace {

constexpr int64_t kEnd = 256;
const ByteTokenizer kTokenizer({{"<|endoftext|>", kEnd}, {"<pad>", 257}});

std::unique_ptr<ConstraintCompiler> Compiler(ConstraintCompiler::Limits limits = {}) {
  auto compiler = ConstraintCompiler::Create(kTokenizer, 260, {kEnd}, limits);
  EXPECT_TRUE(compiler.ok()) << compiler.status();
  return *std::move(compiler);
}

ConstraintSpec Spec(ConstraintSpec::Kind kind, std::string text) {
  return {.kind = kind, .text = std::move(text), .choices = {}};
}

bool Allowed(const uint32_t* mask, int64_t token) { return (mask[token / 32] >> (token % 32)) & 1; }

// An answer drawn uniformly from the allowed tokens (end-of-text at most at `end_weight` odds
// once it is allowed), until the matcher ends it or `max_tokens`.
std::string Walk(TokenMatcher& matcher, uint64_t seed, int max_tokens = 400) {
  std::mt19937_64 rng(seed);
  std::string text;
  for (int step = 0; step < max_tokens && !matcher.Complete(); ++step) {
    absl::StatusOr<const uint32_t*> mask = matcher.AllowedTokens();
    EXPECT_TRUE(mask.ok()) << mask.status();
    if (!mask.ok()) break;
    std::vector<int64_t> allowed;
    for (int64_t t = 0; t < 260; ++t) {
      if (Allowed(*mask, t)) allowed.push_back(t);
    }
    EXPECT_FALSE(allowed.empty()) << text;
    if (allowed.empty()) break;
    if (Allowed(*mask, kEnd) && rng() % 4 == 0) {
      EXPECT_TRUE(matcher.Consume(kEnd).ok());
      break;
    }
    // Closing brackets and quotes weigh more, so that answers end.
    int64_t token = allowed[rng() % allowed.size()];
    for (int64_t closing : {'}', ']', '"', ','}) {
      if (Allowed(*mask, closing) && rng() % 3 == 0) token = closing;
    }
    EXPECT_TRUE(matcher.Consume(token).ok());
    if (token < 256) text += static_cast<char>(token);
  }
  return text;
}

TEST(GbnfToLarkTest, TranslatesRulesLiteralsClassesAndRepetitions) {
  absl::StatusOr<std::string> lark = GbnfToLark(R"(# a comment
root ::= item-list   # another
item-list ::= "[" item ("," item){0,3} "]"
item ::= [a-z\x41-\u005A]+ | "\"q\"" | num? | "é" .
num ::= [^0-9\n]{2,} | "x"*
)");
  ASSERT_TRUE(lark.ok()) << lark.status();
  EXPECT_TRUE(absl::StrContains(*lark, "start: g1_root")) << *lark;
  EXPECT_TRUE(absl::StrContains(*lark, R"(g2_item_list: "[" g3_item ("," g3_item){0,3} "]")"))
      << *lark;
  EXPECT_TRUE(absl::StrContains(*lark, R"(/[\x{61}-\x{7A}\x{41}-\x{5A}]/+ | "\"q\"" | g4_num?)"))
      << *lark;
  EXPECT_TRUE(absl::StrContains(*lark, R"(/[^\x{30}-\x{39}\x{A}]/{2,})")) << *lark;
  // And it compiles to what it says.
  auto compiler = Compiler();
  auto matcher = compiler->Compile(
      Spec(ConstraintSpec::Kind::kGbnf, "root ::= \"a\" [bc]{2} (\"d\" | \"e\")\n"));
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  for (char c : std::string("acbe")) ASSERT_TRUE((*matcher)->Consume(c).ok());
  EXPECT_FALSE((*matcher)->Consume('x').ok());
}

TEST(GbnfToLarkTest, ErrorsNameTheLineAndColumn) {
  const auto error = [](const std::string& gbnf) {
    absl::StatusOr<std::string> lark = GbnfToLark(gbnf);
    EXPECT_FALSE(lark.ok()) << *lark;
    return std::string(lark.status().message());
  };
  EXPECT_TRUE(absl::StrContains(error("root ::= \"a\"\nx ::= [b"), "line 2"));
  EXPECT_TRUE(
      absl::StrContains(error("root ::= \"a\" missing\n"), "`missing` is used but not defined"));
  EXPECT_TRUE(absl::StrContains(error("item ::= \"a\"\n"), "no `root` rule"));
  EXPECT_TRUE(absl::StrContains(error("root ::= \"a\"\n  | \"b\"\n"), "line 2, column 3"));
  EXPECT_TRUE(absl::StrContains(error("root ::= [z-a]\n"), "runs backwards"));
  EXPECT_TRUE(absl::StrContains(error("root ::= \"\\q\"\n"), "unknown escape"));
  EXPECT_TRUE(absl::StrContains(error("root ::= " + std::string(10000, '(') + "\"a\"\n"),
                                "nest deeper than 100"));
  // After `|` a rule goes on across lines, as in llama.cpp.
  EXPECT_TRUE(GbnfToLark("root ::= \"a\" |\n  \"b\"\n").ok());
}

TEST(ConstraintCompilerTest, ARegexAllowsOnlyWhatMatchesThenEndOfText) {
  auto compiler = Compiler();
  auto matcher = compiler->Compile(Spec(ConstraintSpec::Kind::kRegex, "[0-9]{3}"));
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  for (char digit : std::string("123")) {
    const uint32_t* mask = *(*matcher)->AllowedTokens();
    EXPECT_TRUE(Allowed(mask, '5'));
    EXPECT_FALSE(Allowed(mask, 'a'));
    EXPECT_FALSE(Allowed(mask, kEnd));
    ASSERT_TRUE((*matcher)->Consume(digit).ok());
  }
  const uint32_t* mask = *(*matcher)->AllowedTokens();
  EXPECT_TRUE(Allowed(mask, kEnd));
  EXPECT_FALSE(Allowed(mask, '4'));
  EXPECT_TRUE((*matcher)->Complete());
}

TEST(ConstraintCompilerTest, RandomAnswersToASchemaAreValidJson) {
  const std::string schema = R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 8},
      "ok": {"type": "boolean"},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
      "kind": {"anyOf": [{"const": 7}, {"type": "null"}]}
    },
    "required": ["name", "ok", "tags", "kind"],
    "additionalProperties": false
  })";
  auto compiler = Compiler();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto matcher = compiler->Compile(Spec(ConstraintSpec::Kind::kJsonSchema, schema));
    ASSERT_TRUE(matcher.ok()) << matcher.status();
    const std::string text = Walk(**matcher, seed);
    const nlohmann::json answer = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(answer.is_discarded()) << text;
    ASSERT_TRUE(answer["name"].is_string()) << text;
    const std::string name = answer["name"].get<std::string>();
    EXPECT_LE(std::count_if(name.begin(), name.end(), [](char c) { return (c & 0xC0) != 0x80; }),
              8)
        << text;  // characters
    EXPECT_TRUE(answer["ok"].is_boolean()) << text;
    EXPECT_LE(answer["tags"].size(), 3u) << text;
    EXPECT_TRUE(answer["kind"].is_null() || answer["kind"] == 7) << text;
    EXPECT_EQ(answer.size(), 4u) << text;
  }
}

TEST(ConstraintCompilerTest, AChoiceIsOneOfItsStrings) {
  auto compiler = Compiler();
  for (uint64_t seed = 0; seed < 10; ++seed) {
    auto matcher = compiler->Compile({.kind = ConstraintSpec::Kind::kChoice,
                                      .text = "",
                                      .choices = {"yes", "no", "maybe \"so\""}});
    ASSERT_TRUE(matcher.ok()) << matcher.status();
    const std::string text = Walk(**matcher, seed);
    EXPECT_TRUE(text == "yes" || text == "no" || text == "maybe \"so\"") << text;
  }
  EXPECT_FALSE(compiler->Compile(Spec(ConstraintSpec::Kind::kChoice, "")).ok());
}

TEST(ConstraintCompilerTest, CachedConstraintsGiveIndependentMatchers) {
  auto compiler = Compiler({.max_bytes = 1 << 20, .cached = 1});
  const ConstraintSpec spec = Spec(ConstraintSpec::Kind::kRegex, "ab|ac");
  auto first = compiler->Compile(spec);
  auto second = compiler->Compile(spec);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE((*first)->Consume('a').ok());
  ASSERT_TRUE((*first)->Consume('b').ok());
  EXPECT_FALSE((*second)->Consume('b').ok());  // still at the start
  // Another constraint pushes the first out of a one-entry cache; both still compile.
  EXPECT_TRUE(compiler->Compile(Spec(ConstraintSpec::Kind::kRegex, "x")).ok());
  EXPECT_TRUE(compiler->Compile(spec).ok());
}

TEST(ConstraintCompilerTest, BadOrCostlyConstraintsAreRefusedWithWhatIsWrong) {
  auto compiler = Compiler({.max_bytes = 4096, .cached = 8});
  const auto error = [&](ConstraintSpec spec) {
    auto matcher = compiler->Compile(spec);
    EXPECT_FALSE(matcher.ok());
    EXPECT_EQ(matcher.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(matcher.status().message());
  };
  using Kind = ConstraintSpec::Kind;
  EXPECT_TRUE(absl::StrContains(error(Spec(Kind::kJsonSchema, R"({"type": )")),
                                "the JSON schema is not valid JSON at byte"));
  EXPECT_TRUE(absl::StrContains(error(Spec(Kind::kJsonSchema, R"({"type": "nope"})")),
                                "json_schema is not valid"));
  EXPECT_TRUE(absl::StrContains(error(Spec(Kind::kRegex, "a(b")), "regex is not valid"));
  EXPECT_TRUE(absl::StrContains(error(Spec(Kind::kLark, "start: (\"a\"\n")), "lark is not valid"));
  EXPECT_TRUE(absl::StrContains(error(Spec(Kind::kJsonSchema, std::string(5000, ' ') + "{}")),
                                "5002 bytes, more than the 4096"));
  // A schema of references that never reach a type: refused when compiled or at the first
  // token, never looped on.
  auto cyclic = compiler->Compile(
      Spec(Kind::kJsonSchema, R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})"));
  if (cyclic.ok()) {
    absl::StatusOr<const uint32_t*> mask = (*cyclic)->AllowedTokens();
    EXPECT_FALSE(mask.ok());
  }
}

}  // namespace
}  // namespace attnserve::structured
