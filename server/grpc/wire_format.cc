#include "server/grpc/wire_format.h"

#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/grpc/protobuf_log.h"

namespace attnserve::server {

absl::Status DecodeRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message& request) {
  // gRPC runs the handler of a call that ended before its message came (a reset stream).
  if (!bytes.Valid()) return absl::InvalidArgumentError("the call carried no request message");
  grpc::ByteBuffer copy(bytes);  // the reader wants a mutable buffer; copies share the slices
  grpc::ProtoBufferReader reader(&copy);
  bool parsed = false;
  const std::string complaint =
      CatchProtobufComplaints([&] { parsed = request.ParseFromZeroCopyStream(&reader); });
  if (parsed) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the request does not decode as ", request.GetTypeName(), ": ",
                   complaint.empty() ? "not valid protobuf wire format"
                                     : absl::StripAsciiWhitespace(complaint)));
}

grpc::ByteBuffer EncodeMessage(const google::protobuf::Message& message) {
  grpc::ByteBuffer bytes;
  grpc::ProtoBufferWriter writer(&bytes, grpc::kProtoBufferWriterMaxBufferLength,
                                 static_cast<int>(message.ByteSizeLong()));
  message.SerializeToZeroCopyStream(&writer);
  return bytes;
}

}  // namespace attnserve::server
