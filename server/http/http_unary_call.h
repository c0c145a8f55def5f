// What every HTTP API's unary call shares: the deadline a request asks for, and the sink that
// answers it once the core has its result (Embed, Classify), with the body its API builds.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/core/answer_writer.h"
#include "server/core/call_gate.h"
#include "server/core/task.h"
#include "server/frontend/admission.h"
#include "server/http/http_server.h"
#include "server/ops/call_scope.h"

namespace attnserve::server {

// A deadline from `X-Request-Timeout: <seconds>`, as gRPC's grpc-timeout gives one; none
// without it (a client that gives up closes its connection, which cancels the work).
CallOrigin HttpOrigin(const HttpRequest& request);

// A successful answer: JSON, unless the API says otherwise.
struct HttpBody {
  HttpBody(std::string json) : bytes(std::move(json)) {}  // NOLINT: JSON is the usual answer
  HttpBody(std::string bytes, std::string content_type, HttpHeaders headers)
      : bytes(std::move(bytes)),
        content_type(std::move(content_type)),
        headers(std::move(headers)) {}

  std::string bytes;
  std::string content_type = "application/json";
  HttpHeaders headers;
};

// A unary task's sink: the answer once the scheduler has the result, built by `body` (off the
// scheduler's thread when large), or the error as `error` words it. Deletes itself once it
// answered; a client that leaves cancels the task.
class HttpUnaryCall final : public TaskSink {
 public:
  using Body = std::function<HttpBody(Task&)>;
  using Error = std::function<void(HttpResponder&, const absl::Status&)>;

  HttpUnaryCall(std::shared_ptr<HttpResponder> responder, CallScope scope, AnswerWriter* answers,
                Body body, Error error)
      : responder_(std::move(responder)),
        scope_(std::move(scope)),
        answers_(answers),
        body_(std::move(body)),
        error_(std::move(error)) {}

  void Admitted(CallGate* gate) { gate_ = gate; }
  void Attach(std::shared_ptr<Task> task);
  // A Generate answered in one message collects its events for the body.
  void Send(GenerationEvent event) override {
    task_->generate().events.push_back(std::move(event));
  }
  void Complete(absl::Status status) override;

 private:
  void Answer();

  const std::shared_ptr<HttpResponder> responder_;
  CallScope scope_;
  AnswerWriter* const answers_;
  const Body body_;
  const Error error_;
  CallGate* gate_ = nullptr;
  std::shared_ptr<Task> task_;
};

// Starts a unary call of a JSON API, counted in the metrics as `call_name` for `model`: its task
// admitted, validated by `validate(worker, task)` and queued through `admission` (which refuses
// it, as every protocol's call, when `prepared` is not OK: a body that did not read), then
// answered by `body`, or with `error`. A JSON answer spells out what protobuf packs: its bound is
// four times attnserve.v1's.
template <typename Validate>
void StartHttpUnary(const Admission& admission, const HttpRequest& request,
                    std::shared_ptr<HttpResponder> responder, const std::string& call_name,
                    const absl::Status& prepared, const std::string& model,
                    const std::string& method, TaskKind kind, Validate validate,
                    HttpUnaryCall::Body body, HttpUnaryCall::Error error) {
  auto* call = new HttpUnaryCall(
      std::move(responder), CallScope(admission.metrics(), admission.ModelLabel(model), call_name),
      admission.answers(), std::move(body), std::move(error));
  admission.Start(
      HttpOrigin(request), model, method, kind, prepared,
      [&](const EngineLoop& worker, Task& task) {
        task.answer_scale = 4;
        return validate(worker, task);
      },
      call);
}

}  // namespace attnserve::server
