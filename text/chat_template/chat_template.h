// Hugging Face chat templates, rendered as transformers renders them (jinja2 3.1 in an
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop controls, transformers'
// tojson, raise_exception and strftime_now): byte for byte, as
// tests/text/chat_template/jinja_reference_test.py checks on real models' templates.
// docs/chat-templates.md lists what is supported and what is refused.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace attnserve {

namespace jinja {
struct Node;
}

struct ChatTemplateLimits {
  int64_t max_output_bytes = 1 << 20;  // rendering stops with ResourceExhausted past this
  // Evaluation steps (loop iterations, expressions, bytes of strings built): a template that
  // loops forever or explodes is stopped with ResourceExhausted.
  int64_t max_steps = 10'000'000;
  int max_depth = 64;  // nesting of calls/macros/statements/expressions during evaluation
};

class ChatTemplate {
 public:
  // Parses `source`; `origin` names where it came from (a file path,
  // "tokenizer_config.json chat_template 'tool_use'") for messages. Anything unsupported is
  // refused here with InvalidArgument naming origin, line and the construct, e.g.
  // "<origin>:12: unsupported tag 'include'".
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source, std::string origin);

  // Renders with `context` (a JSON object: messages, add_generation_prompt, bos_token,
  // eos_token, tools, and any extra keys become top-level variables). As transformers'
  // apply_chat_template does, `tools` and `documents` are none and `add_generation_prompt` is
  // false unless given. `now` feeds strftime_now (formatted in the local time zone, as
  // datetime.now() is). The ordered_json overload keeps the request's key order (which tojson
  // shows); nlohmann::json sorts keys.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context, absl::Time now,
                                     const ChatTemplateLimits& limits = {}) const;
  absl::StatusOr<std::string> Render(const nlohmann::json& context, absl::Time now,
                                     const ChatTemplateLimits& limits = {}) const;

  const std::string& origin() const { return origin_; }
  // The template's text, for what it shows the model (e.g. how it writes tool calls).
  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::shared_ptr<const jinja::Node> root, std::string origin, std::string source)
      : root_(std::move(root)), origin_(std::move(origin)), source_(std::move(source)) {}
  template <typename Json>
  absl::StatusOr<std::string> RenderJson(const Json& context, absl::Time now,
                                         const ChatTemplateLimits& limits) const;

  std::shared_ptr<const jinja::Node> root_;
  std::string origin_;
  std::string source_;
};

// A model's templates, as transformers finds them in a model directory: tokenizer_config.json's
// "chat_template" (a string, or a list of {"name","template"} objects), or a chat_template.jinja
// file beside it (which wins for "default", as in newer transformers); plus bos_token/eos_token
// from tokenizer_config.json (a string or an AddedToken object {"content": ...}).
struct ChatTemplates {
  std::map<std::string, ChatTemplate> by_name;  // "default" for the single/default one
  std::string bos_token, eos_token;
  // nullptr if absent; an empty name means "default".
  const ChatTemplate* Find(std::string_view name) const;
};

// A ChatTemplates with no templates when the directory has none. A template that fails to
// parse refuses the load with the file named.
absl::StatusOr<ChatTemplates> LoadChatTemplates(const std::filesystem::path& model_directory);

}  // namespace attnserve
