#include "text/tokenizer/metaspace_options.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "text/tokenizer/normalized_text.h"

namespace attnserve {

absl::StatusOr<MetaspaceOptions> MetaspaceOptions::FromJson(const nlohmann::json& json,
                                                            const char* part) {
  MetaspaceOptions options;
  auto replacement = json.find("replacement");
  if (replacement == json.end() || !replacement->is_string() ||
      CodePoints(replacement->get<std::string>()).size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(part, ".replacement: one char is required"));
  }
  options.replacement_utf8 = replacement->get<std::string>();
  options.replacement = CodePoints(options.replacement_utf8)[0];
  if (auto scheme = json.find("prepend_scheme"); scheme != json.end()) {
    if (*scheme == "always") {
      options.prepend_scheme = PrependScheme::kAlways;
    } else if (*scheme == "first") {
      options.prepend_scheme = PrependScheme::kFirst;
    } else if (*scheme == "never") {
      options.prepend_scheme = PrependScheme::kNever;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(part, ".prepend_scheme: one of always, first, never is required"));
    }
  }
  // The legacy add_prefix_space: false means never, and must not contradict prepend_scheme.
  if (auto legacy = json.find("add_prefix_space"); legacy != json.end() && !legacy->is_null()) {
    if (!legacy->is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(part, ".add_prefix_space: a boolean"));
    }
    if (!legacy->get<bool>()) {
      if (options.prepend_scheme != PrependScheme::kNever) {
        return absl::InvalidArgumentError(
            absl::StrCat(part, ".add_prefix_space: false contradicts prepend_scheme"));
      }
    }
  }
  if (auto split = json.find("split"); split != json.end() && !split->is_null()) {
    if (!split->is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(part, ".split: a boolean is required"));
    }
    options.split = split->get<bool>();
  }
  return options;
}

}  // namespace attnserve
