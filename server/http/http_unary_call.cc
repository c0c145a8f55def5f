#include "server/http/http_unary_call.h"

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"

namespace attnserve::server {

CallOrigin HttpOrigin(const HttpRequest& request) {
  CallOrigin origin{.deadline = absl::InfiniteFuture(), .client = request.client};
  double seconds = 0;
  if (absl::SimpleAtod(request.Header("x-request-timeout"), &seconds) && seconds > 0 &&
      seconds < 1e9) {
    origin.deadline = absl::Now() + absl::Seconds(seconds);
  }
  return origin;
}

void HttpUnaryCall::Attach(std::shared_ptr<Task> task) {
  task_ = std::move(task);
  responder_->OnGone([task = std::weak_ptr<Task>(task_)] {
    if (auto held = task.lock()) held->Cancel();
  });
}

void HttpUnaryCall::Complete(absl::Status status) {
  if (gate_ != nullptr) gate_->Leave();
  scope_.Finish(status);
  if (!status.ok()) {
    error_(*responder_, status);
    delete this;
    return;
  }
  // A large answer is built off the scheduler's thread.
  if (answers_ != nullptr && task_->response_bytes.bytes() > AnswerWriter::kInlineBytes) {
    answers_->Post([this] { Answer(); });
  } else {
    Answer();
  }
}

void HttpUnaryCall::Answer() {
  HttpBody body = body_(*task_);
  responder_->Respond(200, std::move(body.content_type), std::move(body.bytes),
                      std::move(body.headers));
  delete this;
}

}  // namespace attnserve::server
