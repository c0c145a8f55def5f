// libprotobuf logs an ERROR line for every request with a string field that is not UTF-8, as
// gRPC refuses it: any client could fill the server's log at will. This lets one such line a
// second through and counts the rest in the next one.
#pragma once

namespace attnserve::server {

void LimitProtobufLogging();

}  // namespace attnserve::server
