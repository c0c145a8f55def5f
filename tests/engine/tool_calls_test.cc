// Tool calls read back from each chat format's text, and what may stream before them.
#include <gtest/gtest.h>

#include "text/tool_calls/tool_call_format.h"

namespace attnserve::tool_calls {
namespace {

void ExpectCalls(const ParsedAnswer& parsed, const std::vector<ToolCall>& calls,
                 const std::string& content = "") {
  EXPECT_EQ(parsed.content, content);
  ASSERT_EQ(parsed.calls.size(), calls.size()) << parsed.content;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(parsed.calls[i].name, calls[i].name);
    EXPECT_EQ(parsed.calls[i].arguments, calls[i].arguments);
  }
}

TEST(ToolCallsTest, EachFormatsCallsAreRead) {
  ExpectCalls(Parse(Format::kHermes,
                    "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": "
                    "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": "
                    "{}}\n</tool_call>"),
              {{"weather", R"({"city":"Paris"})"}, {"time", "{}"}}, "Let me look.");
  ExpectCalls(Parse(Format::kLlama3Json,
                    R"({"name": "weather", "parameters": {"city": "Oslo", "days": 2}})"),
              {{"weather", R"({"city":"Oslo","days":2})"}});
  ExpectCalls(
      Parse(
          Format::kLlama3Json,
          R"(<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": [1]}})"),
      {{"a", "{}"}, {"b", R"({"x":[1]})"}});
  ExpectCalls(Parse(Format::kMistral,
                    R"([TOOL_CALLS] [{"name": "weather", "arguments": {"city": "Rome"}}])"),
              {{"weather", R"({"city":"Rome"})"}});
  ExpectCalls(Parse(Format::kMistral,
                    R"(Sure.[TOOL_CALLS]weather[ARGS]{"city": "Rome"}[TOOL_CALLS]time[ARGS]{})"),
              {{"weather", R"({"city":"Rome"})"}, {"time", "{}"}}, "Sure.");
  ExpectCalls(Parse(Format::kFunctionaryV31, R"(<function=weather>{"city": "Lima"}</function>)"),
              {{"weather", R"({"city":"Lima"})"}});
  ExpectCalls(Parse(Format::kFunctionaryV32, "all\nChecking.>>>weather\n{\"city\": \"Kyiv\"}"),
              {{"weather", R"({"city":"Kyiv"})"}}, "Checking.");
  ExpectCalls(Parse(Format::kDeepSeek,
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>weather\n"
                    "```json\n{\"city\": \"Seoul\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
              {{"weather", R"({"city":"Seoul"})"}});
  ExpectCalls(Parse(Format::kDeepSeek,
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>weather<｜tool▁sep｜>{\"city\": "
                    "\"Seoul\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
              {{"weather", R"({"city":"Seoul"})"}});
  ExpectCalls(Parse(Format::kJsonList, R"([{"name": "f", "parameters": {"n": 1}}])"),
              {{"f", R"({"n":1})"}});
  // Generic: Hermes tags, or an answer that is one call.
  ExpectCalls(Parse(Format::kGeneric, R"({"name": "f", "arguments": "{\"n\": 1}"})"),
              {{"f", R"({"n": 1})"}});
}

TEST(ToolCallsTest, WhatDoesNotParseIsContent) {
  for (const char* answer :
       {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": </tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>", "{\"city\": \"Paris\"}", "just text"}) {
    ExpectCalls(Parse(Format::kHermes, answer), {}, answer);
  }
  ExpectCalls(Parse(Format::kLlama3Json, "The answer is {not json}"), {},
              "The answer is {not json}");
}

TEST(ToolCallsTest, ContentStreamsUntilACallMayBegin) {
  EXPECT_EQ(ContentPrefix(Format::kHermes, "Hello there"), 11u);
  EXPECT_EQ(ContentPrefix(Format::kHermes, "Hello <tool_"), 6u) << "a marker's start is held";
  EXPECT_EQ(ContentPrefix(Format::kHermes, "Hi <tool_call>{"), 3u);
  EXPECT_EQ(ContentPrefix(Format::kHermes, "a < b"), 5u);
  EXPECT_EQ(ContentPrefix(Format::kLlama3Json, "  {\"name\""), 0u) << "a bare call";
  EXPECT_EQ(ContentPrefix(Format::kLlama3Json, "Paris is"), 8u);
  EXPECT_EQ(ContentPrefix(Format::kMistral, "ok [TOOL"), 3u);
  EXPECT_EQ(ContentPrefix(Format::kJsonList, "[{"), 0u);
}

TEST(ToolCallsTest, FormatsAreReadFromTemplatesOrNamed) {
  EXPECT_EQ(DetectFormat("{% for tool in tools %}<tool_call>{{ tool }}</tool_call>{% endfor %}"),
            Format::kHermes);
  EXPECT_EQ(DetectFormat("{{ '[TOOL_CALLS]' }}"), Format::kMistral);
  EXPECT_EQ(DetectFormat("<|start_header_id|>ipython{% if tools %}"), Format::kLlama3Json);
  EXPECT_EQ(DetectFormat("<｜tool▁call▁begin｜>"), Format::kDeepSeek);
  EXPECT_EQ(DetectFormat("<function={{ name }}>"), Format::kFunctionaryV31);
  EXPECT_EQ(DetectFormat(">>>all\n"), Format::kFunctionaryV32);
  EXPECT_EQ(DetectFormat("<|im_start|>{{ message.content }}"), Format::kGeneric);
  EXPECT_EQ(FormatNamed("mistral"), Format::kMistral);
  EXPECT_EQ(FormatNamed("nope"), std::nullopt);
}

}  // namespace
}  // namespace attnserve::tool_calls
