#include "server/http/json_fields.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace attnserve::server {

using json = nlohmann::ordered_json;

absl::StatusOr<std::string> RequiredString(const json& body, const std::string& name) {
  const json* value = FindField(body, name);
  if (value == nullptr) return InvalidField(name, "is missing");
  if (!value->is_string()) return InvalidField(name, "must be a string");
  return value->get<std::string>();
}

absl::StatusOr<bool> Bool(const json& body, const std::string& name, bool otherwise) {
  const json* value = FindField(body, name);
  if (value == nullptr) return otherwise;
  if (!value->is_boolean()) return InvalidField(name, "must be true or false");
  return value->get<bool>();
}

absl::StatusOr<int64_t> Int(const json& body, const std::string& name, int64_t otherwise,
                            int64_t min, int64_t max) {
  const json* value = FindField(body, name);
  if (value == nullptr) return otherwise;
  if (!value->is_number_integer()) return InvalidField(name, "must be an integer");
  // An unsigned value past int64's range is out of range too.
  if (value->is_number_unsigned() &&
      value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidField(name, absl::StrCat("must be in [", min, ", ", max, "]"));
  }
  const int64_t number = value->get<int64_t>();
  if (number < min || number > max) {
    return InvalidField(name, absl::StrCat("= ", number, " must be in [", min, ", ", max, "]"));
  }
  return number;
}

absl::StatusOr<float> Number(const json& body, const std::string& name, float otherwise) {
  const json* value = FindField(body, name);
  if (value == nullptr) return otherwise;
  if (!value->is_number()) return InvalidField(name, "must be a number");
  const double number = value->get<double>();
  if (!std::isfinite(number) || std::abs(number) > 1e30)
    return InvalidField(name, "is out of range");
  return static_cast<float>(number);
}

absl::StatusOr<std::vector<std::string>> Strings(const json& body, const std::string& name,
                                                 size_t most) {
  const json* value = FindField(body, name);
  if (value == nullptr) return InvalidField(name, "is missing");
  if (value->is_string()) return std::vector{value->get<std::string>()};
  if (!value->is_array()) return InvalidField(name, "must be a string or a list of strings");
  if (value->size() > most) {
    return InvalidField(name, absl::StrCat("has ", value->size(), " entries; at most ", most));
  }
  std::vector<std::string> strings;
  strings.reserve(value->size());
  for (size_t i = 0; i < value->size(); ++i) {
    if (!(*value)[i].is_string()) {
      return InvalidField(absl::StrCat(name, "[", i, "]"), "must be a string");
    }
    strings.push_back((*value)[i].get<std::string>());
  }
  return strings;
}

// A token id list: integers in int64's range (the vocabulary is checked by validation).
absl::StatusOr<std::vector<int64_t>> TokenIds(const json& list, const std::string& name) {
  std::vector<int64_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& id = list[i];
    if (!id.is_number_integer() ||
        (id.is_number_unsigned() &&
         id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      return InvalidField(absl::StrCat(name, "[", i, "]"), "must be a token id");
    }
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

absl::StatusOr<std::vector<SequenceInput>> Sequences(const json& body, const std::string& name,
                                                     int64_t max_sequences) {
  const json* value = FindField(body, name);
  if (value == nullptr) return InvalidField(name, "is missing");
  if (value->is_string()) return std::vector{SequenceInput::Text(value->get<std::string>())};
  if (!value->is_array()) {
    return InvalidField(name, "must be a string, a list of strings or a list of token ids");
  }
  if (value->empty()) return InvalidField(name, "is empty");
  if (value->front().is_number()) {
    ASSIGN_OR_RETURN(auto ids, TokenIds(*value, name));
    return std::vector{SequenceInput::Tokens(std::move(ids))};
  }
  if (static_cast<int64_t>(value->size()) > max_sequences) {
    return InvalidField(name,
                        absl::StrCat("has ", value->size(), " entries; at most ", max_sequences));
  }
  std::vector<SequenceInput> sequences;
  for (size_t i = 0; i < value->size(); ++i) {
    const json& entry = (*value)[i];
    if (entry.is_string()) {
      sequences.push_back(SequenceInput::Text(entry.get<std::string>()));
    } else if (entry.is_array()) {
      ASSIGN_OR_RETURN(auto ids, TokenIds(entry, absl::StrCat(name, "[", i, "]")));
      sequences.push_back(SequenceInput::Tokens(std::move(ids)));
    } else {
      return InvalidField(absl::StrCat(name, "[", i, "]"),
                          "must be a string or a list of token ids");
    }
  }
  return sequences;
}

}  // namespace attnserve::server
