#include "text/tool_calls/tool_call_format.h"

#include <algorithm>
#include <array>

#include "nlohmann/json.hpp"

namespace attnserve::tool_calls {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistral = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kFunctionaryV32 = ">>>";
constexpr std::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDeepSeekCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";
constexpr std::string_view kDeepSeekCallEnd = "<｜tool▁call▁end｜>";

// std::string_view counterparts of absl's helpers (Debian's absl::string_view is its own type).
bool IsSpace(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v';
}
std::string_view StripLeading(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  return text;
}
std::string_view Strip(std::string_view text) {
  text = StripLeading(text);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}
bool ConsumePrefix(std::string_view* text, std::string_view prefix) {
  if (!text->starts_with(prefix)) return false;
  text->remove_prefix(prefix.size());
  return true;
}
bool ConsumeSuffix(std::string_view* text, std::string_view suffix) {
  if (!text->ends_with(suffix)) return false;
  text->remove_suffix(suffix.size());
  return true;
}
bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}
std::string Trim(std::string_view text) { return std::string(Strip(text)); }

// The length of the JSON object or list that `text` starts with (strings and nesting followed),
// or 0 when it does not start with a whole one.
size_t JsonExtent(std::string_view text) {
  if (text.empty() || (text[0] != '{' && text[0] != '[')) return 0;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return 0;
}

std::optional<json> ParseJson(std::string_view text) {
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return std::nullopt;
  return value;
}

std::string ArgumentsText(const json& arguments) {
  if (arguments.is_string()) return arguments.get<std::string>();
  return arguments.dump(-1, ' ', false, json::error_handler_t::replace);
}

// {"name": ..., "arguments" or "parameters": ...}, as most formats write a call.
std::optional<ToolCall> CallFromObject(const json& call) {
  if (!call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  ToolCall parsed{.name = name->get<std::string>(), .arguments = "{}"};
  for (const char* key : {"arguments", "parameters"}) {
    if (const auto arguments = call.find(key); arguments != call.end()) {
      parsed.arguments = ArgumentsText(*arguments);
      break;
    }
  }
  return parsed;
}

// One object or a list of them.
bool AddCalls(const json& value, std::vector<ToolCall>& calls) {
  if (value.is_array()) {
    if (value.empty()) return false;
    for (const json& entry : value) {
      if (!AddCalls(entry, calls)) return false;
    }
    return true;
  }
  std::optional<ToolCall> call = CallFromObject(value);
  if (!call) return false;
  calls.push_back(*std::move(call));
  return true;
}

ParsedAnswer AllContent(std::string_view answer) {
  return {.content = std::string(answer), .calls = {}};
}

// Calls between open and close tags (a missing last close is allowed: the answer ended there).
ParsedAnswer Tagged(std::string_view answer, std::string_view open, std::string_view close,
                    bool name_in_tag) {
  ParsedAnswer parsed;
  size_t at = 0;
  while (true) {
    const size_t begin = answer.find(open, at);
    if (begin == std::string_view::npos) {
      parsed.content += answer.substr(at);
      break;
    }
    parsed.content += answer.substr(at, begin - at);
    const size_t inside = begin + open.size();
    size_t end = answer.find(close, inside);
    std::string_view body =
        answer.substr(inside, end == std::string_view::npos ? end : end - inside);
    at = end == std::string_view::npos ? answer.size() : end + close.size();
    std::string name;
    if (name_in_tag) {  // <function=NAME>{...}
      const size_t gt = body.find('>');
      if (gt == std::string_view::npos) return AllContent(answer);
      name = std::string(body.substr(0, gt));
      body.remove_prefix(gt + 1);
    }
    const std::string trimmed = Trim(body);
    std::optional<json> value = ParseJson(trimmed);
    if (!value) return AllContent(answer);
    if (name_in_tag) {
      if (name.empty() || !value->is_object()) return AllContent(answer);
      parsed.calls.push_back({.name = name, .arguments = ArgumentsText(*value)});
    } else if (!AddCalls(*value, parsed.calls)) {
      return AllContent(answer);
    }
  }
  parsed.content = Trim(parsed.content);
  return parsed;
}

// Llama 3.1+: the answer is one call's JSON (or several separated by ';'), maybe after
// <|python_tag|>.
ParsedAnswer Llama3Json(std::string_view answer) {
  std::string_view rest = StripLeading(answer);
  std::string content;
  if (const size_t tag = rest.find(kPythonTag); tag != std::string_view::npos) {
    content = Trim(rest.substr(0, tag));
    rest = StripLeading(rest.substr(tag + kPythonTag.size()));
  }
  ParsedAnswer parsed{.content = content, .calls = {}};
  while (!rest.empty()) {
    const size_t extent = JsonExtent(rest);
    if (extent == 0) return AllContent(answer);
    std::optional<json> value = ParseJson(rest.substr(0, extent));
    if (!value || !AddCalls(*value, parsed.calls)) return AllContent(answer);
    rest = StripLeading(rest.substr(extent));
    if (ConsumePrefix(&rest, ";"))
      rest = StripLeading(rest);
    else if (!rest.empty())
      return AllContent(answer);
  }
  if (parsed.calls.empty()) return AllContent(answer);
  return parsed;
}

// Mistral: [TOOL_CALLS] then a JSON list of calls (v3), or name[ARGS]{...} per call (v11).
ParsedAnswer Mistral(std::string_view answer) {
  const size_t first = answer.find(kMistral);
  if (first == std::string_view::npos) return AllContent(answer);
  ParsedAnswer parsed{.content = Trim(answer.substr(0, first)), .calls = {}};
  std::string_view rest = answer.substr(first);
  while (ConsumePrefix(&rest, kMistral)) {
    rest = StripLeading(rest);
    if (!rest.empty() && (rest[0] == '[' || rest[0] == '{')) {
      const size_t extent = JsonExtent(rest);
      std::optional<json> value = extent ? ParseJson(rest.substr(0, extent)) : std::nullopt;
      if (!value || !AddCalls(*value, parsed.calls)) return AllContent(answer);
      rest = StripLeading(rest.substr(extent));
      continue;
    }
    const size_t args = rest.find(kMistralArgs);
    if (args == std::string_view::npos) return AllContent(answer);
    const std::string name = Trim(rest.substr(0, args));
    rest = StripLeading(rest.substr(args + kMistralArgs.size()));
    const size_t extent = JsonExtent(rest);
    std::optional<json> value = extent ? ParseJson(rest.substr(0, extent)) : std::nullopt;
    if (name.empty() || !value) return AllContent(answer);
    parsed.calls.push_back({.name = name, .arguments = ArgumentsText(*value)});
    rest = StripLeading(rest.substr(extent));
  }
  if (!rest.empty() || parsed.calls.empty()) return AllContent(answer);
  return parsed;
}

// Functionary v3.2: ">>>name\n{...}" per call; ">>>all\n" is text for the user.
ParsedAnswer FunctionaryV32(std::string_view answer) {
  std::string_view rest = answer;
  ConsumePrefix(&rest, kFunctionaryV32);  // the template opens the first one
  ParsedAnswer parsed;
  while (!rest.empty()) {
    const size_t newline = rest.find('\n');
    if (newline == std::string_view::npos) return AllContent(answer);
    const std::string name = Trim(rest.substr(0, newline));
    rest.remove_prefix(newline + 1);
    const size_t next = rest.find(kFunctionaryV32);
    const std::string_view body = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view()
                                          : rest.substr(next + kFunctionaryV32.size());
    if (name == "all") {
      parsed.content += body;
      continue;
    }
    std::optional<json> value = ParseJson(Trim(body));
    if (name.empty() || !value) return AllContent(answer);
    parsed.calls.push_back({.name = name, .arguments = ArgumentsText(*value)});
  }
  if (parsed.calls.empty()) return AllContent(answer);
  parsed.content = Trim(parsed.content);
  return parsed;
}

// DeepSeek V3: <｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```
// <｜tool▁call▁end｜>; V3.1 and later: <｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}.
ParsedAnswer DeepSeek(std::string_view answer) {
  const size_t first = std::min(answer.find(kDeepSeekCallsBegin), answer.find(kDeepSeekCallBegin));
  if (first == std::string_view::npos) return AllContent(answer);
  ParsedAnswer parsed{.content = Trim(answer.substr(0, first)), .calls = {}};
  std::string_view rest = answer.substr(first);
  size_t begin;
  while ((begin = rest.find(kDeepSeekCallBegin)) != std::string_view::npos) {
    rest.remove_prefix(begin + kDeepSeekCallBegin.size());
    const size_t end = rest.find(kDeepSeekCallEnd);
    std::string_view call = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view()
                                         : rest.substr(end + kDeepSeekCallEnd.size());
    const size_t sep = call.find(kDeepSeekSep);
    if (sep == std::string_view::npos) return AllContent(answer);
    std::string name = Trim(call.substr(0, sep));
    std::string_view body = call.substr(sep + kDeepSeekSep.size());
    if (name == "function") {
      const size_t newline = body.find('\n');
      if (newline == std::string_view::npos) return AllContent(answer);
      name = Trim(body.substr(0, newline));
      body.remove_prefix(newline + 1);
    }
    std::string_view arguments = Strip(body);
    ConsumePrefix(&arguments, "```json");
    ConsumeSuffix(&arguments, "```");
    std::optional<json> value = ParseJson(Trim(arguments));
    if (name.empty() || !value) return AllContent(answer);
    parsed.calls.push_back({.name = name, .arguments = ArgumentsText(*value)});
  }
  if (parsed.calls.empty()) return AllContent(answer);
  return parsed;
}

std::vector<std::string_view> Markers(Format format) {
  switch (format) {
    case Format::kGeneric:
    case Format::kHermes:
      return {kHermesOpen};
    case Format::kLlama3Json:
      return {kPythonTag};
    case Format::kMistral:
      return {kMistral};
    case Format::kFunctionaryV31:
      return {kFunctionOpen};
    case Format::kFunctionaryV32:
      return {kFunctionaryV32};
    case Format::kDeepSeek:
      return {kDeepSeekCallsBegin, kDeepSeekCallBegin};
    case Format::kJsonList:
      return {};
  }
  return {};
}

}  // namespace

Format DetectFormat(std::string_view chat_template) {
  if (Contains(chat_template, kHermesOpen)) return Format::kHermes;
  if (Contains(chat_template, kMistral)) return Format::kMistral;
  if (Contains(chat_template, "tool▁call▁begin")) return Format::kDeepSeek;
  if (Contains(chat_template, kFunctionOpen)) return Format::kFunctionaryV31;
  if (Contains(chat_template, ">>>all")) return Format::kFunctionaryV32;
  if (Contains(chat_template, kPythonTag) ||
      (Contains(chat_template, "<|start_header_id|>") && Contains(chat_template, "tools"))) {
    return Format::kLlama3Json;
  }
  return Format::kGeneric;
}

std::optional<Format> FormatNamed(std::string_view name) {
  for (Format format : {Format::kGeneric, Format::kHermes, Format::kLlama3Json, Format::kMistral,
                        Format::kFunctionaryV31, Format::kFunctionaryV32, Format::kDeepSeek}) {
    if (FormatName(format) == name) return format;
  }
  return std::nullopt;
}

std::string_view FormatName(Format format) {
  switch (format) {
    case Format::kGeneric:
      return "generic";
    case Format::kHermes:
      return "hermes";
    case Format::kLlama3Json:
      return "llama3_json";
    case Format::kMistral:
      return "mistral";
    case Format::kFunctionaryV31:
      return "functionary_v3_1";
    case Format::kFunctionaryV32:
      return "functionary_v3_2";
    case Format::kDeepSeek:
      return "deepseek_v3";
    case Format::kJsonList:
      return "json_list";
  }
  return "generic";
}

ParsedAnswer Parse(Format format, std::string_view answer) {
  switch (format) {
    case Format::kHermes:
      return Tagged(answer, kHermesOpen, kHermesClose, /*name_in_tag=*/false);
    case Format::kGeneric: {
      if (Contains(answer, kHermesOpen)) {
        return Tagged(answer, kHermesOpen, kHermesClose, /*name_in_tag=*/false);
      }
      return Llama3Json(answer);
    }
    case Format::kLlama3Json:
      return Llama3Json(answer);
    case Format::kMistral:
      return Mistral(answer);
    case Format::kFunctionaryV31:
      return Tagged(answer, kFunctionOpen, kFunctionClose, /*name_in_tag=*/true);
    case Format::kFunctionaryV32:
      return FunctionaryV32(answer);
    case Format::kDeepSeek:
      return DeepSeek(answer);
    case Format::kJsonList: {
      ParsedAnswer parsed;
      std::optional<json> value = ParseJson(Trim(answer));
      if (!value || !value->is_array() || !AddCalls(*value, parsed.calls))
        return AllContent(answer);
      return parsed;
    }
  }
  return AllContent(answer);
}

size_t ContentPrefix(Format format, std::string_view answer) {
  if (format == Format::kJsonList) return 0;
  // An answer that opens with JSON may be a call in formats that write calls bare.
  if (format == Format::kLlama3Json || format == Format::kGeneric ||
      format == Format::kFunctionaryV32) {
    const std::string_view start = StripLeading(answer);
    if (start.empty() || start[0] == '{' || start[0] == '[' ||
        (format == Format::kFunctionaryV32 &&
         std::string_view(kFunctionaryV32).starts_with(start.substr(0, 3)))) {
      return 0;
    }
  }
  size_t safe = answer.size();
  for (std::string_view marker : Markers(format)) {
    if (const size_t at = answer.find(marker); at != std::string_view::npos) {
      safe = std::min(safe, at);
      continue;
    }
    // A tail that may grow into the marker.
    for (size_t keep = std::min(marker.size() - 1, answer.size()); keep > 0; --keep) {
      if (marker.starts_with(answer.substr(answer.size() - keep))) {
        safe = std::min(safe, answer.size() - keep);
        break;
      }
    }
  }
  return safe;
}

}  // namespace attnserve::tool_calls
