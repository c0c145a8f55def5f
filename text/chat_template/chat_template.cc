#include "text/chat_template/chat_template.h"

#include <exception>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/chat_template/jinja_ast.h"
#include "text/chat_template/jinja_evaluator.h"
#include "text/chat_template/jinja_parser.h"

namespace attnserve {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source, std::string origin) {
  ASSIGN_OR_RETURN(std::unique_ptr<jinja::Node> root, jinja::ParseTemplate(source, origin));
  return ChatTemplate(std::shared_ptr<const jinja::Node>(std::move(root)), std::move(origin),
                      std::string(source));
}

template <typename Json>
absl::StatusOr<std::string> ChatTemplate::RenderJson(const Json& context, absl::Time now,
                                                     const ChatTemplateLimits& limits) const {
  if (!context.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin_, ": the rendering context must be a JSON object"));
  }
  try {
    jinja::Value variables = jinja::FromJson(context);
    // What apply_chat_template always passes.
    jinja::DictData& dict = variables.dict();
    if (dict.Find(std::string_view("tools")) == nullptr) {
      dict.Set(jinja::Value::String("tools"), jinja::Value::None());
    }
    if (dict.Find(std::string_view("documents")) == nullptr) {
      dict.Set(jinja::Value::String("documents"), jinja::Value::None());
    }
    if (dict.Find(std::string_view("add_generation_prompt")) == nullptr) {
      dict.Set(jinja::Value::String("add_generation_prompt"), jinja::Value::Bool(false));
    }
    jinja::RenderBudget budget;
    budget.max_output_bytes = limits.max_output_bytes;
    budget.max_steps = limits.max_steps;
    budget.max_depth = limits.max_depth;
    return jinja::Render(*root_, origin_, variables, now, budget);
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ": ", error.what()));
  }
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                                 absl::Time now,
                                                 const ChatTemplateLimits& limits) const {
  return RenderJson(context, now, limits);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& context, absl::Time now,
                                                 const ChatTemplateLimits& limits) const {
  return RenderJson(context, now, limits);
}

const ChatTemplate* ChatTemplates::Find(std::string_view name) const {
  const auto it = by_name.find(std::string(name.empty() ? "default" : name));
  return it == by_name.end() ? nullptr : &it->second;
}

namespace {

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot be read"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path.string(), ": read failed"));
  return text.str();
}

// A special token: a string, an AddedToken object {"content": ...}, or null/absent.
absl::StatusOr<std::string> SpecialToken(const nlohmann::json& config, const char* key,
                                         const std::string& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": ", key, " must be a string or an object with a string \"content\""));
}

}  // namespace

absl::StatusOr<ChatTemplates> LoadChatTemplates(const std::filesystem::path& model_directory) {
  ChatTemplates templates;
  const std::filesystem::path config_path = model_directory / "tokenizer_config.json";
  const std::string config_file = config_path.string();
  std::error_code error;
  if (std::filesystem::exists(config_path, error)) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(config_path));
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(text);
    } catch (const std::exception& parse_error) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_file, ": not valid JSON: ", parse_error.what()));
    }
    if (!config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_file, ": not a JSON object"));
    }
    ASSIGN_OR_RETURN(templates.bos_token, SpecialToken(config, "bos_token", config_file));
    ASSIGN_OR_RETURN(templates.eos_token, SpecialToken(config, "eos_token", config_file));
    const auto chat_template = config.find("chat_template");
    if (chat_template != config.end() && !chat_template->is_null()) {
      if (chat_template->is_string()) {
        ASSIGN_OR_RETURN(ChatTemplate parsed,
                         ChatTemplate::Parse(chat_template->get<std::string>(),
                                             absl::StrCat(config_file, " chat_template")));
        templates.by_name.insert_or_assign("default", std::move(parsed));
      } else if (chat_template->is_array()) {
        for (const auto& entry : *chat_template) {
          const bool well_formed = entry.is_object() && entry.contains("name") &&
                                   entry["name"].is_string() && entry.contains("template") &&
                                   entry["template"].is_string();
          if (!well_formed) {
            return absl::InvalidArgumentError(absl::StrCat(
                config_file,
                ": chat_template list entries must be objects with string \"name\" and "
                "\"template\""));
          }
          const std::string name = entry["name"].get<std::string>();
          ASSIGN_OR_RETURN(
              ChatTemplate parsed,
              ChatTemplate::Parse(entry["template"].get<std::string>(),
                                  absl::StrCat(config_file, " chat_template '", name, "'")));
          templates.by_name.insert_or_assign(name, std::move(parsed));
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            config_file,
            ": chat_template must be a string or a list of {\"name\", \"template\"} objects, "
            "not ",
            chat_template->type_name()));
      }
    }
  }
  const std::filesystem::path jinja_path = model_directory / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path, error)) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(jinja_path));
    ASSIGN_OR_RETURN(ChatTemplate parsed, ChatTemplate::Parse(text, jinja_path.string()));
    templates.by_name.insert_or_assign("default", std::move(parsed));
  }
  return templates;
}

}  // namespace attnserve
