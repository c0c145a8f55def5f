// The chat-template engine's refusals, limits and loading. Rendering itself is checked against
// jinja2 by jinja_reference_test.py.
#include "text/chat_template/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace attnserve {
namespace {

using ::testing::HasSubstr;

absl::Status ParseError(std::string_view source) {
  return ChatTemplate::Parse(source, "test.jinja").status();
}

absl::StatusOr<std::string> Render(std::string_view source, const nlohmann::ordered_json& context,
                                   const ChatTemplateLimits& limits = {}) {
  auto parsed = ChatTemplate::Parse(source, "test.jinja");
  if (!parsed.ok()) return parsed.status();
  return parsed->Render(context, absl::FromUnixSeconds(0), limits);
}

TEST(ChatTemplateParseTest, RefusesUnsupportedTagsNamingTheLine) {
  for (const char* tag :
       {"include", "extends", "import", "block", "call", "from", "autoescape", "do"}) {
    const absl::Status status = ParseError(std::string("line one\n\n{% ") + tag + " 'x' %}");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << tag;
    EXPECT_THAT(status.message(),
                HasSubstr(std::string("test.jinja:3: unsupported tag '") + tag + "'"));
  }
}

TEST(ChatTemplateParseTest, RefusesUnknownFiltersTestsAndFunctions) {
  EXPECT_THAT(ParseError("{{ x }}\n{{ x|urlize }}").message(),
              HasSubstr("test.jinja:2: unknown filter 'urlize'"));
  EXPECT_THAT(ParseError("{{ x is prime }}").message(),
              HasSubstr("test.jinja:1: unknown test 'prime'"));
  EXPECT_THAT(ParseError("\n\n{{ lipsum(2) }}").message(),
              HasSubstr("test.jinja:3: unknown function 'lipsum'"));
  EXPECT_THAT(ParseError("{{ caller() }}").message(), HasSubstr("unknown function 'caller'"));
  // A macro the template defines, and the globals, may be called.
  EXPECT_TRUE(ChatTemplate::Parse("{% macro f() %}{% endmacro %}{{ f() }}{{ range(2) }}"
                                  "{{ namespace(a=1) }}{{ dict(a=1) }}"
                                  "{{ raise_exception('x') if false }}{{ strftime_now('%Y') }}",
                                  "t")
                  .ok());
}

TEST(ChatTemplateRenderTest, UnknownFiltersAndTestsInConditionalsFailOnlyWhenTheyRun) {
  // As jinja2 3.x (DeepSeek V3.2's template calls from_json, which transformers lacks, in a
  // branch plain requests never take).
  const nlohmann::ordered_json context = {{"x", "a"}, {"taken", false}};
  EXPECT_EQ(*Render("{% if taken %}{{ x | from_json }}{% elif taken and x is prime %}{% endif %}ok",
                    context),
            "ok");
  EXPECT_EQ(*Render("{{ x | from_json if taken else x }}", context), "a");
  EXPECT_EQ(*Render("{{ (x | from_json) if taken else 1 }}", context), "1");
  auto ran = Render("{% if not taken %}\n{{ x | from_json }}{% endif %}", context);
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ran.status().message(), HasSubstr("no filter named 'from_json'"));
  EXPECT_THAT(ParseError("{{ x | from_json }}").message(), HasSubstr("unknown filter 'from_json'"));
  EXPECT_THAT(ParseError("{{ x | from_json + 1 }}").message(), HasSubstr("unknown filter"));
}

TEST(ChatTemplateRenderTest, SelectRejectAndMapOnNoneGiveNothing) {
  // jinja2 iterates only truthy values (Functionary v3.1's template maps over absent tools).
  const nlohmann::ordered_json context = {{"x", nullptr}};
  for (const char* filter : {"select('odd')", "reject('odd')", "selectattr('a')", "rejectattr('a')",
                             "map(attribute='a')", "map('upper')"}) {
    auto rendered = Render(std::string("{{ x | ") + filter + " | list }}", context);
    ASSERT_TRUE(rendered.ok()) << filter << ": " << rendered.status();
    EXPECT_EQ(*rendered, "[]") << filter;
  }
}

TEST(ChatTemplateParseTest, RefusesOtherUnsupportedConstructs) {
  EXPECT_THAT(ParseError("{% for x in y recursive %}{% endfor %}").message(),
              HasSubstr("test.jinja:1: unsupported recursive for loop"));
  EXPECT_THAT(ParseError("{{ f(*args) }}").message(), HasSubstr("unsupported *args"));
  EXPECT_THAT(ParseError("{% break %}").message(), HasSubstr("'break' outside of a loop"));
}

TEST(ChatTemplateParseTest, RefusesSyntaxErrorsNamingTheLine) {
  EXPECT_THAT(ParseError("a\n{% if x %}\nb").message(), HasSubstr("test.jinja:3: unexpected end"));
  EXPECT_THAT(ParseError("{{ (1 }}").message(), HasSubstr("test.jinja:1:"));
  EXPECT_THAT(ParseError("{# open").message(), HasSubstr("Missing end of comment tag"));
  EXPECT_THAT(ParseError("{% raw %}x").message(), HasSubstr("Missing end of raw directive"));
  EXPECT_THAT(ParseError("\n{% endif %}").message(),
              HasSubstr("test.jinja:2: unexpected tag 'endif'"));
  EXPECT_THAT(ParseError("{{ 99999999999999999999 }}").message(), HasSubstr("64-bit range"));
}

TEST(ChatTemplateParseTest, RefusesNestingDeeperThanTheParserAllows) {
  const std::string deep = std::string(500, '(') + "1" + std::string(500, ')');
  EXPECT_THAT(ParseError("{{ " + deep + " }}").message(), HasSubstr("nested deeper"));
  std::string chain = "{{ 1";
  for (int i = 0; i < 1000; ++i) chain += " + 1";
  EXPECT_THAT(ParseError(chain + " }}").message(), HasSubstr("nested deeper"));
}

TEST(ChatTemplateRenderTest, RaiseExceptionCarriesTheTemplatesMessage) {
  auto rendered = Render("{{ bos_token }}\n{{ raise_exception('Roles must alternate') }}",
                         {{"bos_token", "<s>"}});
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rendered.status().message(), HasSubstr("test.jinja:2: Roles must alternate"));
}

TEST(ChatTemplateRenderTest, RuntimeErrorsAreInvalidArgumentWithTheLine) {
  auto rendered =
      Render("x\n{{ messages[0].content.missing.deeper }}", {{"messages", {{{"content", "hi"}}}}});
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rendered.status().message(),
              HasSubstr("test.jinja:2: 'str object' has no attribute"));
  EXPECT_THAT(Render("{{ [1].append(2) }}", nlohmann::ordered_json::object()).status().message(),
              HasSubstr("unsafe"));
  EXPECT_EQ(Render("{{ 1 }}", nlohmann::ordered_json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateRenderTest, AppliesTransformersDefaults) {
  auto rendered = Render("{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }}",
                         nlohmann::ordered_json::object());
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, "True True False");
}

TEST(ChatTemplateRenderTest, KeepsTheRequestsKeyOrderWithOrderedJson) {
  nlohmann::ordered_json context;
  context["tool"] = {{"z", 1}, {"a", 2}};
  auto rendered = Render("{{ tool|tojson }}", context);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, R"({"z": 1, "a": 2})");
}

TEST(ChatTemplateLimitsTest, HugeRangeIsRefusedAsJinja2Does) {
  auto rendered =
      Render("{% for i in range(1000000000) %}x{% endfor %}", nlohmann::ordered_json::object());
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(rendered.status().message(), HasSubstr("MAX_RANGE"));
}

TEST(ChatTemplateLimitsTest, NestedLoopsStopAtMaxSteps) {
  ChatTemplateLimits limits;
  limits.max_steps = 100'000;
  auto rendered =
      Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
             nlohmann::ordered_json::object(), limits);
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(rendered.status().message(), HasSubstr("max_steps (100000 steps)"));
}

TEST(ChatTemplateLimitsTest, OutputStopsAtMaxOutputBytes) {
  ChatTemplateLimits limits;
  limits.max_output_bytes = 1000;
  auto rendered = Render("{% for i in range(100) %}0123456789abcdef{% endfor %}",
                         nlohmann::ordered_json::object(), limits);
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(rendered.status().message(), HasSubstr("max_output_bytes (1000)"));
  // Strings built without output count too: doubling a string stops at the limit.
  auto doubled = Render(
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
      "{% set ns.s = ns.s + ns.s %}{% endfor %}",
      nlohmann::ordered_json::object(), limits);
  EXPECT_EQ(doubled.status().code(), absl::StatusCode::kResourceExhausted);
  auto repeated = Render("{{ 'x' * 1000000000000 }}", nlohmann::ordered_json::object(), limits);
  EXPECT_EQ(repeated.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ChatTemplateLimitsTest, MacroRecursionStopsAtMaxDepth) {
  auto rendered = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                         nlohmann::ordered_json::object());
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(rendered.status().message(), HasSubstr("max_depth (64)"));
}

class LoadChatTemplatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::path(::testing::TempDir()) /
                 ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(directory_ / name, std::ios::binary) << text;
  }
  std::filesystem::path directory_;
};

TEST_F(LoadChatTemplatesTest, StringTemplateAndSpecialTokens) {
  Write("tokenizer_config.json",
        R"({"chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
            "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})");
  auto templates = LoadChatTemplates(directory_);
  ASSERT_TRUE(templates.ok()) << templates.status();
  EXPECT_EQ(templates->bos_token, "<s>");
  EXPECT_EQ(templates->eos_token, "</s>");
  const ChatTemplate* chosen = templates->Find("");
  ASSERT_NE(chosen, nullptr);
  auto rendered = chosen->Render(
      nlohmann::json{{"bos_token", "<s>"}, {"messages", {{{"content", "hi"}}}}}, absl::Now());
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, "<s>hi");
  EXPECT_EQ(templates->Find("tool_use"), nullptr);
}

TEST_F(LoadChatTemplatesTest, ListOfNamedTemplates) {
  Write("tokenizer_config.json",
        R"({"chat_template": [{"name": "default", "template": "d"},
                              {"name": "tool_use", "template": "t"}]})");
  auto templates = LoadChatTemplates(directory_);
  ASSERT_TRUE(templates.ok()) << templates.status();
  EXPECT_EQ(templates->by_name.size(), 2u);
  ASSERT_NE(templates->Find("tool_use"), nullptr);
  EXPECT_EQ(*templates->Find("tool_use")->Render(nlohmann::json::object(), absl::Now()), "t");
  EXPECT_EQ(*templates->Find("default")->Render(nlohmann::json::object(), absl::Now()), "d");
}

TEST_F(LoadChatTemplatesTest, ChatTemplateJinjaWins) {
  Write("tokenizer_config.json", R"({"chat_template": "from config", "eos_token": "</s>"})");
  Write("chat_template.jinja", "from file\n");
  auto templates = LoadChatTemplates(directory_);
  ASSERT_TRUE(templates.ok()) << templates.status();
  EXPECT_EQ(*templates->Find("")->Render(nlohmann::json::object(), absl::Now()), "from file");
  EXPECT_EQ(templates->eos_token, "</s>");
}

TEST_F(LoadChatTemplatesTest, NoTemplates) {
  auto empty = LoadChatTemplates(directory_);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->by_name.empty());
  Write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  auto without = LoadChatTemplates(directory_);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(without->by_name.empty());
  EXPECT_EQ(without->Find(""), nullptr);
}

TEST_F(LoadChatTemplatesTest, RefusesMalformedConfigsNamingTheFile) {
  const std::string file = (directory_ / "tokenizer_config.json").string();
  for (const char* config : {R"({"chat_template": 3})", R"({"chat_template": {"default": "x"}})",
                             R"({"chat_template": [{"name": "a"}]})", R"({"chat_template": ["x"]})",
                             R"({"bos_token": 1})", "not json", "[]"}) {
    Write("tokenizer_config.json", config);
    auto templates = LoadChatTemplates(directory_);
    EXPECT_EQ(templates.status().code(), absl::StatusCode::kInvalidArgument) << config;
    EXPECT_THAT(templates.status().message(), HasSubstr(file)) << config;
  }
}

TEST_F(LoadChatTemplatesTest, RefusesATemplateThatDoesNotParseNamingTheFile) {
  Write("tokenizer_config.json",
        R"({"chat_template": [{"name": "tool_use", "template": "\n{% include 'x' %}"}]})");
  auto from_config = LoadChatTemplates(directory_);
  EXPECT_THAT(from_config.status().message(),
              HasSubstr("tokenizer_config.json chat_template 'tool_use':2: unsupported tag "
                        "'include'"));
  Write("tokenizer_config.json", "{}");
  Write("chat_template.jinja", "{{ x|nope }}");
  auto from_file = LoadChatTemplates(directory_);
  EXPECT_THAT(from_file.status().message(),
              HasSubstr("chat_template.jinja:1: unknown filter 'nope'"));
}

}  // namespace
}  // namespace attnserve
