// The keys callers must present, when the server has any: `Authorization: Bearer <key>` on
// HTTP, the `authorization` metadata on gRPC (as OpenAI's, vLLM's and TEI's clients send them).
// Keys come from --api_key and from --api_key_file, which is read again when it changes, so a
// key is rotated by rewriting the file (a Kubernetes Secret's mount is) without a restart. A
// key is compared in time that does not depend on it, and is never logged or echoed.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace attnserve::server {

class ApiKeys {
 public:
  // `keys`: given on the command line (comma-separated there); `file`: one key a line, blank
  // lines and lines starting with '#' skipped. Neither: every caller is let in.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Create(std::vector<std::string> keys,
                                                         std::string file);

  // Whether callers must present a key.
  bool required() const { return required_; }
  // The caller of an `authorization` value ("Bearer <key>"): "key:<digest>", which fair shares
  // go by, or UNAUTHENTICATED saying what is wrong (it never repeats the key). Any thread.
  absl::StatusOr<std::string> Check(absl::string_view authorization) const;

 private:
  ApiKeys(std::vector<std::string> keys, std::string file);
  // Reads the file again if it changed since it was last read; keeps the keys it had when the
  // file cannot be read or holds none. With mutex_ held.
  void Refresh(absl::Time now) const;

  const std::vector<std::string> flag_keys_;
  const std::string file_;
  const bool required_;
  mutable std::mutex mutex_;  // guards what follows
  mutable std::shared_ptr<const std::vector<std::string>> keys_;
  mutable absl::Time checked_ = absl::InfinitePast();
  mutable int64_t file_stamp_ = 0;  // the file's modification time and size, combined
};

}  // namespace attnserve::server
