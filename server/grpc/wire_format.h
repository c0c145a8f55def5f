// Requests and responses to and from their wire bytes. The service takes raw bytes from gRPC and
// parses them itself: gRPC's generated code answers a request that does not parse with
// UNIMPLEMENTED and no message, while libprotobuf logs why.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"

namespace attnserve::server {

// Parses `bytes` into `request`. Failing, INVALID_ARGUMENT naming the message type and what
// libprotobuf found wrong (for example the string field that is not UTF-8); nothing is logged.
absl::Status DecodeRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message& request);

// `message` serialized.
grpc::ByteBuffer EncodeMessage(const google::protobuf::Message& message);

}  // namespace attnserve::server
