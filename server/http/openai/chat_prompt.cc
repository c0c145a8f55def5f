#include "server/http/openai/chat_prompt.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "text/chat_template/chat_template.h"

namespace attnserve::server {

absl::StatusOr<const ChatTemplate*> ChatTemplateFor(const EngineLoop& worker,
                                                    const ChatRequest& chat) {
  const ChatTemplates& templates = worker.model().chat_templates;
  // As transformers chooses: a model's "tool_use" template when tools are given.
  const bool tool_use = chat.template_name.empty() && chat.tools.tools.is_array() &&
                        templates.Find("tool_use") != nullptr;
  const ChatTemplate* chat_template = templates.Find(tool_use ? "tool_use" : chat.template_name);
  if (chat_template != nullptr) return chat_template;
  if (templates.by_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", worker.name(),
        " has no chat template (tokenizer_config.json's chat_template or chat_template.jinja); "
        "use /v1/completions"));
  }
  std::vector<std::string> names;
  for (const auto& [name, unused] : templates.by_name) names.push_back(name);
  return absl::InvalidArgumentError(absl::StrCat(
      "model ", worker.name(), " has no chat template named '", chat.template_name.substr(0, 64),
      "' (it has ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<std::string> RenderChatPrompt(const EngineLoop& worker, const ChatRequest& chat) {
  const ChatTemplates& templates = worker.model().chat_templates;
  ASSIGN_OR_RETURN(const ChatTemplate* chat_template, ChatTemplateFor(worker, chat));
  nlohmann::ordered_json context = chat.template_context;
  if (!context.contains("bos_token")) context["bos_token"] = templates.bos_token;
  if (!context.contains("eos_token")) context["eos_token"] = templates.eos_token;
  ChatTemplateLimits limits;
  limits.max_output_bytes = worker.options().max_text_bytes;
  auto rendered = chat_template->Render(context, absl::Now(), limits);
  if (!rendered.ok()) {
    return absl::Status(rendered.status().code(),
                        absl::StrCat("the chat template of model ", worker.name(), ": ",
                                     rendered.status().message()));
  }
  return rendered;
}

}  // namespace attnserve::server
