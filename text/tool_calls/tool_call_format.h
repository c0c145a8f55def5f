// How chat models write tool calls in their answers, and reading them back as OpenAI's
// `tool_calls`: Hermes and Qwen2.5's `<tool_call>{...}</tool_call>`, Llama 3.1+'s bare JSON
// (after `<|python_tag|>` or alone), Mistral's `[TOOL_CALLS]`, Functionary v3.1's
// `<function=name>{...}</function>` and v3.2's `>>>name\n{...}`, DeepSeek V3's
// `<｜tool▁call▁begin｜>`, and the JSON list of {"name", "parameters"} that a server constrains
// an answer to when a tool call is required. The format is read from the model's chat template
// (what it shows the model), or named in serving.json.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnserve::tool_calls {

enum class Format {
  kGeneric,  // no known format: Hermes tags, or an answer that is one call's JSON
  kHermes,
  kLlama3Json,
  kMistral,
  kFunctionaryV31,
  kFunctionaryV32,
  kDeepSeek,
  kJsonList,  // [{"name": ..., "parameters": {...}}, ...]: a required call, constrained
};

// The format a chat template teaches its model.
Format DetectFormat(std::string_view chat_template);
// By name ("hermes", "llama3_json", "mistral", "functionary_v3_1", "functionary_v3_2",
// "deepseek_v3", "generic"); nullopt for another.
std::optional<Format> FormatNamed(std::string_view name);
std::string_view FormatName(Format format);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI's API sends it
};

struct ParsedAnswer {
  std::string content;  // the text outside the calls
  std::vector<ToolCall> calls;
};

// The calls in a whole answer. An answer whose calls do not parse (JSON cut short, no name) is
// all content, as vLLM's parsers leave it.
ParsedAnswer Parse(Format format, std::string_view answer);

// While an answer streams: how many of its first bytes are content for sure, before anything
// that is, or could grow into, the start of a call.
size_t ContentPrefix(Format format, std::string_view answer);

}  // namespace attnserve::tool_calls
