// libFuzzer target: arbitrary bytes as a chat template. Parsing either refuses it with an error
// that names the origin, or gives a template that renders a fixed conversation under tight
// limits: an output or an error, never a crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "text/chat_template/chat_template.h"

namespace {

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "chat_template_fuzz: %s\n", what);
    std::abort();
  }
}

const nlohmann::ordered_json& Context() {
  static const auto* context = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi 😀\nthere"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
        "function": {"name": "f", "arguments": {"x": 1.5, "y": [true, null]}}}]},
      {"role": "tool", "content": "42"},
      {"role": "user", "content": [{"type": "text", "text": "part"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })"));
  return *context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string source(reinterpret_cast<const char*>(data), size);
  auto parsed = attnserve::ChatTemplate::Parse(source, "fuzz.jinja");
  if (!parsed.ok()) {
    Require(absl::StartsWith(parsed.status().message(), "fuzz.jinja"),
            "a parse error does not name the origin");
    return 0;
  }
  attnserve::ChatTemplateLimits limits;
  limits.max_output_bytes = 64 * 1024;
  limits.max_steps = 100'000;
  limits.max_depth = 32;
  auto rendered = parsed->Render(Context(), absl::FromUnixSeconds(1700000000), limits);
  if (rendered.ok()) {
    Require(rendered->size() <= static_cast<size_t>(limits.max_output_bytes),
            "the output exceeds max_output_bytes");
  } else {
    Require(rendered.status().code() == absl::StatusCode::kInvalidArgument ||
                rendered.status().code() == absl::StatusCode::kResourceExhausted,
            "a render error is neither InvalidArgument nor ResourceExhausted");
  }
  return 0;
}
