// A ModelInferRequest's parameters, each read and checked against what its method takes:
// INVALID_ARGUMENT names the parameter, its type or its range.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/inference/grpc_predict_v2.pb.h"

namespace attnserve::server {

class InferParameters {
 public:
  explicit InferParameters(const inference::ModelInferRequest& request) : request_(request) {}

  absl::Status OnlyThese(std::vector<std::string> known) const {
    for (const auto& [name, value] : request_.parameters()) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", name.substr(0, 64), "' is not one this method takes",
            known.empty() ? "; it takes none" : "; it takes " + absl::StrJoin(known, ", ")));
      }
    }
    return absl::OkStatus();
  }
  const inference::InferParameter* Find(const std::string& name) const {
    auto it = request_.parameters().find(name);
    return it == request_.parameters().end() ? nullptr : &it->second;
  }
  absl::StatusOr<int64_t> Integer(const std::string& name, int64_t absent) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return absent;
    if (p->has_int64_param()) return p->int64_param();
    if (p->has_uint64_param() &&
        p->uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(p->uint64_param());
    }
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' must be an integer (int64_param)"));
  }
  // An integer in [low, high].
  absl::StatusOr<int64_t> Integer(const std::string& name, int64_t absent, int64_t low,
                                  int64_t high) const {
    auto value = Integer(name, absent);
    if (value.ok() && (*value < low || *value > high)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' = ", *value, " must be in [", low, ", ", high, "]"));
    }
    return value;
  }
  std::optional<uint64_t> Unsigned(const std::string& name) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return std::nullopt;
    if (p->has_uint64_param()) return p->uint64_param();
    if (p->has_int64_param() && p->int64_param() >= 0) return p->int64_param();
    return std::nullopt;
  }
  absl::StatusOr<double> Number(const std::string& name, double absent) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return absent;
    if (p->has_double_param()) return p->double_param();
    if (p->has_int64_param()) return static_cast<double>(p->int64_param());
    if (p->has_uint64_param()) return static_cast<double>(p->uint64_param());
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' must be a number (double_param)"));
  }
  absl::StatusOr<bool> Boolean(const std::string& name) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return false;
    if (p->has_bool_param()) return p->bool_param();
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' must be a boolean (bool_param)"));
  }
  absl::StatusOr<std::string> String(const std::string& name) const {
    const inference::InferParameter* p = Find(name);
    if (p == nullptr) return std::string();
    if (p->has_string_param()) return p->string_param();
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' must be a string (string_param)"));
  }

 private:
  const inference::ModelInferRequest& request_;
};

}  // namespace attnserve::server
