// Renders chat templates for jinja_reference_test.py, which compares the output with jinja2's.
//
//   chat_template_tool TEMPLATE CONTEXT.json   prints the rendering (exit 0) or the error (exit 1)
//   chat_template_tool --batch                 reads JSON lines {"template": path | "source":
//                                              text, "context": {...}, "now": unix seconds,
//                                              "limits": {...}} and writes a JSON line
//                                              {"ok": true, "output": ...} or {"ok": false,
//                                              "error": ..., "code": ...} for each
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "text/chat_template/chat_template.h"

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int RenderOne(const std::string& template_path, const std::string& context_path) {
  auto parsed = attnserve::ChatTemplate::Parse(ReadFile(template_path), template_path);
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n";
    return 1;
  }
  const auto context = nlohmann::ordered_json::parse(ReadFile(context_path));
  auto output = parsed->Render(context, absl::Now());
  if (!output.ok()) {
    std::cerr << output.status().message() << "\n";
    return 1;
  }
  std::cout << *output;
  return 0;
}

int RenderBatch() {
  std::map<std::string, absl::StatusOr<attnserve::ChatTemplate>> templates;
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::ordered_json request = nlohmann::ordered_json::parse(line);
    nlohmann::ordered_json answer;
    absl::StatusOr<attnserve::ChatTemplate> inline_template = absl::UnknownError("");
    const absl::StatusOr<attnserve::ChatTemplate>* chosen = nullptr;
    if (request.contains("source")) {
      inline_template = attnserve::ChatTemplate::Parse(
          request["source"].get<std::string>(), request.value("origin", std::string("inline")));
      chosen = &inline_template;
    } else {
      const std::string path = request["template"].get<std::string>();
      auto it = templates.find(path);
      if (it == templates.end()) {
        it = templates.emplace(path, attnserve::ChatTemplate::Parse(ReadFile(path), path)).first;
      }
      chosen = &it->second;
    }
    absl::StatusOr<std::string> output = absl::UnknownError("");
    if (!chosen->ok()) {
      output = chosen->status();
    } else {
      attnserve::ChatTemplateLimits limits;
      if (request.contains("limits")) {
        const auto& given = request["limits"];
        limits.max_output_bytes = given.value("max_output_bytes", limits.max_output_bytes);
        limits.max_steps = given.value("max_steps", limits.max_steps);
        limits.max_depth = given.value("max_depth", limits.max_depth);
      }
      const absl::Time now = absl::FromUnixSeconds(request.value("now", int64_t{0}));
      output = (*chosen)->Render(request["context"], now, limits);
    }
    if (output.ok()) {
      answer["ok"] = true;
      answer["output"] = *output;
    } else {
      answer["ok"] = false;
      answer["error"] = std::string(output.status().message());
      answer["code"] = absl::StatusCodeToString(output.status().code());
    }
    std::cout << answer.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    std::cout.flush();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--batch") return RenderBatch();
  if (argc == 3) return RenderOne(argv[1], argv[2]);
  std::fprintf(stderr, "usage: %s TEMPLATE CONTEXT.json | --batch\n", argv[0]);
  return 2;
}
