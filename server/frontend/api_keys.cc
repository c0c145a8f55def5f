#include "server/frontend/api_keys.h"

#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace attnserve::server {
namespace {

// How often a request may make the server look at the key file.
constexpr absl::Duration kFileCheckInterval = absl::Seconds(1);

absl::StatusOr<std::vector<std::string>> ReadKeys(const std::string& file) {
  std::ifstream in(file);
  if (!in) return absl::NotFoundError(absl::StrCat("--api_key_file: cannot read ", file));
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    const absl::string_view key = absl::StripAsciiWhitespace(line);
    if (!key.empty() && key[0] != '#') keys.emplace_back(key);
  }
  return keys;
}

int64_t FileStamp(const std::string& file) {
  struct stat info;
  if (stat(file.c_str(), &info) != 0) return 0;
  return static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000007 + info.st_mtim.tv_nsec +
         static_cast<int64_t>(info.st_size) * 31 + static_cast<int64_t>(info.st_ino);
}

// Whether `presented` is `key`, in time that depends on `presented`'s length alone: every byte
// of it is compared, whatever matched before.
bool SameKey(absl::string_view presented, absl::string_view key) {
  unsigned difference = presented.size() != key.size() ? 1 : 0;
  for (size_t i = 0; i < presented.size(); ++i) {
    const char expected = key.empty() ? '\0' : key[i % key.size()];
    difference |= static_cast<unsigned char>(presented[i] ^ expected);
  }
  return difference == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Create(std::vector<std::string> keys,
                                                         std::string file) {
  std::erase_if(keys, [](const std::string& key) { return key.empty(); });
  auto created = std::unique_ptr<ApiKeys>(new ApiKeys(std::move(keys), std::move(file)));
  if (!created->file_.empty()) {
    auto read = ReadKeys(created->file_);
    if (!read.ok()) return read.status();
    if (read->empty() && created->flag_keys_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--api_key_file: ", created->file_, " holds no key"));
    }
  }
  std::lock_guard lock(created->mutex_);
  created->Refresh(absl::Now());
  return created;
}

ApiKeys::ApiKeys(std::vector<std::string> keys, std::string file)
    : flag_keys_(std::move(keys)),
      file_(std::move(file)),
      required_(!flag_keys_.empty() || !file_.empty()),
      keys_(std::make_shared<std::vector<std::string>>(flag_keys_)) {}

void ApiKeys::Refresh(absl::Time now) const {
  if (file_.empty() || now - checked_ < kFileCheckInterval) return;
  checked_ = now;
  const int64_t stamp = FileStamp(file_);
  if (stamp == file_stamp_) return;
  auto read = ReadKeys(file_);
  if (!read.ok() || read->empty()) {
    std::cerr << "attnserve: --api_key_file " << file_
              << (read.ok() ? " holds no key" : " cannot be read") << "; keeping the "
              << keys_->size() << " key(s) read before\n";
    return;
  }
  file_stamp_ = stamp;
  auto keys = std::make_shared<std::vector<std::string>>(flag_keys_);
  keys->insert(keys->end(), read->begin(), read->end());
  if (*keys != *keys_) {
    std::cerr << "attnserve: " << keys->size() << " API key(s) from --api_key and " << file_
              << "\n";
  }
  keys_ = std::move(keys);
}

absl::StatusOr<std::string> ApiKeys::Check(absl::string_view authorization) const {
  if (!required_) return std::string();
  std::shared_ptr<const std::vector<std::string>> keys;
  {
    std::lock_guard lock(mutex_);
    Refresh(absl::Now());
    keys = keys_;
  }
  authorization = absl::StripAsciiWhitespace(authorization);
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "no API key: send it as 'Authorization: Bearer <key>' (gRPC: 'authorization' metadata)");
  }
  constexpr absl::string_view kBearer = "bearer ";
  if (authorization.size() <= kBearer.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kBearer.size()), kBearer)) {
    return absl::UnauthenticatedError(
        "the authorization is not 'Bearer <key>'; send the API key as a bearer token");
  }
  const absl::string_view presented =
      absl::StripLeadingAsciiWhitespace(authorization.substr(kBearer.size()));
  bool found = false;
  for (const std::string& key : *keys) found |= SameKey(presented, key);
  if (!found) return absl::UnauthenticatedError("the API key is not valid");
  return absl::StrFormat("key:%016x", std::hash<std::string_view>()(
                                          std::string_view(presented.data(), presented.size())));
}

}  // namespace attnserve::server
