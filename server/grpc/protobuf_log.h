// libprotobuf logs an ERROR line for every message it fails to parse because a string field is
// not UTF-8: any client could fill the server's log at will. Requests are parsed with the
// complaints caught (they go into the answer instead), and whatever else libprotobuf logs gets
// one line a second, the rest counted in the next one.
#pragma once

#include <string>

#include "absl/functional/function_ref.h"

namespace attnserve::server {

void LimitProtobufLogging();

// Runs `parse`; libprotobuf's complaints on this thread meanwhile are returned, not logged.
std::string CatchProtobufComplaints(absl::FunctionRef<void()> parse);

}  // namespace attnserve::server
