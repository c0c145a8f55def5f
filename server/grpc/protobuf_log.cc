#include "server/grpc/protobuf_log.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <iostream>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attnserve::server {
namespace {

thread_local std::string* caught = nullptr;  // set while CatchProtobufComplaints runs

std::mutex log_mutex;
absl::Time last_line = absl::InfinitePast();  // guarded by log_mutex
int64_t suppressed = 0;                       // guarded by log_mutex

void LogAtMostOncePerSecond(google::protobuf::LogLevel level, const char* file, int line,
                            const std::string& message) {
  static const char* const kLevels[] = {"INFO", "WARNING", "ERROR", "FATAL"};
  if (caught != nullptr && level < google::protobuf::LOGLEVEL_FATAL) {
    absl::StrAppend(caught, caught->empty() ? "" : "; ", message);
    return;
  }
  std::lock_guard lock(log_mutex);
  const absl::Time now = absl::Now();
  if (level < google::protobuf::LOGLEVEL_FATAL && now - last_line < absl::Seconds(1)) {
    ++suppressed;
    return;
  }
  std::cerr << "[libprotobuf " << kLevels[level] << " " << file << ":" << line << "] " << message;
  if (suppressed > 0) std::cerr << " (" << suppressed << " more in the last interval)";
  std::cerr << "\n";
  last_line = now;
  suppressed = 0;
}

}  // namespace

void LimitProtobufLogging() { google::protobuf::SetLogHandler(&LogAtMostOncePerSecond); }

std::string CatchProtobufComplaints(absl::FunctionRef<void()> parse) {
  std::string complaints;
  caught = &complaints;
  parse();
  caught = nullptr;
  return complaints;
}

}  // namespace attnserve::server
