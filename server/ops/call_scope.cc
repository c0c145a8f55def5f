#include "server/ops/call_scope.h"

namespace attnserve::server {

CallScope::CallScope(ServerMetrics& metrics, std::string model, std::string method)
    : metrics_(metrics),
      model_(std::move(model)),
      method_(std::move(method)),
      in_flight_(metrics.in_flight.Add({{"model", model_}})) {
  in_flight_.Increment();
}

void CallScope::Finish(const absl::Status& status) {
  in_flight_.Decrement();
  // gRPC's names for the codes, which absl shares ("INVALID_ARGUMENT").
  metrics_.requests
      .Add({{"model", model_},
            {"method", method_},
            {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
  metrics_.latency.Add({{"model", model_}, {"method", method_}})
      .Observe(absl::ToDoubleSeconds(absl::Now() - start_));
}

}  // namespace attnserve::server
