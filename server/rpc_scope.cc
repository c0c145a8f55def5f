#include "server/rpc_scope.h"

namespace attnserve::server {
namespace {

const char* StatusName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  return index >= 0 && index < 17 ? kNames[index] : "UNKNOWN";
}

}  // namespace

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

RpcScope::RpcScope(ServerMetrics& metrics, std::string model, std::string method)
    : metrics_(metrics),
      model_(std::move(model)),
      method_(std::move(method)),
      in_flight_(metrics.in_flight.Add({{"model", model_}})) {
  in_flight_.Increment();
}

grpc::Status RpcScope::Finish(const absl::Status& status) {
  const grpc::Status result = ToGrpc(status);
  in_flight_.Decrement();
  metrics_.requests
      .Add({{"model", model_}, {"method", method_}, {"code", StatusName(result.error_code())}})
      .Increment();
  metrics_.latency.Add({{"model", model_}, {"method", method_}})
      .Observe(absl::ToDoubleSeconds(absl::Now() - start_));
  return result;
}

}  // namespace attnserve::server
