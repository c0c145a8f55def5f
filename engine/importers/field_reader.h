// Reads the fields of a JSON object (config.json and its kin), remembering the first error, which
// names the file and the field, and every key it read.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve {

// Reads fields out of the config object, remembering the first error and every key it read.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& object, const std::string& path)
      : object_(object), path_(path) {}

  int64_t Int(const std::string& key, int64_t min, int64_t max, std::optional<int64_t> fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    // null stands for the default in Hugging Face's configs (GPT-2's n_inner).
    if (it == object_.end() || it->is_null()) return Missing(key, fallback);
    if (!it->is_number_integer()) return Fail(key, "must be an integer"), 0;
    const int64_t value = it->get<int64_t>();
    if (value < min || value > max) {
      return Fail(key, absl::StrCat("is ", value, ", outside [", min, ", ", max, "]")), 0;
    }
    return value;
  }

  double Real(const std::string& key, double min, double max, double fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return fallback;
    if (!it->is_number()) return Fail(key, "must be a number"), 0.0;
    const double value = it->get<double>();
    if (!(value >= min && value <= max)) {
      return Fail(key, absl::StrCat("is ", value, ", outside [", min, ", ", max, "]")), 0.0;
    }
    return value;
  }

  bool Bool(const std::string& key, bool fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return fallback;
    if (!it->is_boolean()) return Fail(key, "must be true or false"), false;
    return it->get<bool>();
  }

  std::string String(const std::string& key, const std::string& fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return fallback;
    if (!it->is_string()) return Fail(key, "must be a string"), fallback;
    return it->get<std::string>();
  }

  template <typename Enum>
  Enum Choice(const std::string& key, const std::map<std::string, Enum>& choices,
              std::optional<std::string> fallback) {
    read_.insert(key);
    auto it = object_.find(key);
    std::string value;
    if (it == object_.end()) {
      if (!fallback) return Fail(key, "is missing"), choices.begin()->second;
      value = *fallback;
    } else if (!it->is_string()) {
      return Fail(key, "must be a string"), choices.begin()->second;
    } else {
      value = it->get<std::string>();
    }
    auto choice = choices.find(value);
    if (choice == choices.end()) {
      std::vector<std::string> names;
      for (const auto& [name, unused] : choices) names.push_back(name);
      return Fail(key,
                  absl::StrCat("is \"", value, "\", expected one of ", absl::StrJoin(names, ", "))),
             choices.begin()->second;
    }
    return choice->second;
  }

  // A list of strings; empty when the key is missing.
  std::vector<std::string> Strings(const std::string& key) {
    read_.insert(key);
    auto it = object_.find(key);
    std::vector<std::string> strings;
    if (it == object_.end()) return strings;
    if (!it->is_array()) return Fail(key, "must be a list of strings"), strings;
    for (const nlohmann::json& item : *it) {
      if (!item.is_string())
        return Fail(key, "must be a list of strings"), std::vector<std::string>();
      strings.push_back(item.get<std::string>());
    }
    return strings;
  }

  const nlohmann::json* Object(const std::string& key) {
    read_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    if (!it->is_object()) return Fail(key, "must be an object"), nullptr;
    return &*it;
  }

  void Fail(const std::string& key, const std::string& message) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(path_, ": field ", key, " ", message));
    }
  }

  // Takes the first error of a reader of a nested object.
  void Adopt(const FieldReader& nested) {
    if (status_.ok()) status_ = nested.status_;
  }

  // Keys nobody read are refused: a misspelled option must not be silently ignored.
  void RejectUnread() {
    for (const auto& [key, value] : object_.items()) {
      if (!read_.count(key)) Fail(key, "is not a known setting");
    }
  }

  const absl::Status& status() const { return status_; }
  const std::string& path() const { return path_; }

 private:
  int64_t Missing(const std::string& key, std::optional<int64_t> fallback) {
    if (fallback) return *fallback;
    Fail(key, "is missing");
    return 0;
  }

  const nlohmann::json& object_;
  std::string path_;
  std::set<std::string> read_;
  absl::Status status_;
};

}  // namespace attnserve
