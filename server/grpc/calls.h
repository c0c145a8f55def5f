// The gRPC side of a task: callback-API reactors that the engine loop (a small unary answer) or
// the answer writer's thread (streams, endings, large answers) completes. No gRPC thread blocks
// while a request waits for the engine, and the answer leaves without a handoff back to a
// handler thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "server/core/answer_writer.h"
#include "server/core/call_gate.h"
#include "server/core/task.h"
#include "server/frontend/admission.h"
#include "server/grpc/grpc_status.h"
#include "server/grpc/wire_format.h"
#include "server/ops/call_scope.h"

namespace attnserve::server {

// Who sent a call and until when it may take: its API key's identity when the server requires
// keys (UNAUTHENTICATED without a valid one in the `authorization` metadata), else its
// connection.
absl::StatusOr<CallOrigin> OriginOf(const grpc::CallbackServerContext& context,
                                    const Admission& admission);

// Shared by both call shapes: the task, and marking it cancelled when the client goes away (an
// RPC cancellation, a deadline, a broken connection), so the scheduler drops it.
class CallTask {
 public:
  void Attach(std::shared_ptr<Task> task) { task_ = std::move(task); }
  // Counted by `gate`: leaves it once gRPC is done with the call.
  void Admitted(CallGate* gate) { gate_ = gate; }

 protected:
  void Done() {
    if (gate_ != nullptr) gate_->Leave();
  }
  void Cancel() {
    if (task_) task_->Cancel();
  }
  std::shared_ptr<Task> task_;
  CallGate* gate_ = nullptr;
};

// A unary call. Completing it serializes the task's result into the response with `encode`
// (which protocol's message it makes is the caller's) and answers, on the completing thread, or
// on `answers`' thread for an answer admitted with a bound over AnswerWriter::kInlineBytes; gRPC
// deletes the reactor once the answer is sent.
class UnaryCall final : public grpc::ServerUnaryReactor, public TaskSink, public CallTask {
 public:
  // May take the task's result apart: the call is its last reader.
  using Encoder = std::function<grpc::ByteBuffer(Task&)>;
  UnaryCall(CallScope scope, grpc::ByteBuffer* response, Encoder encode,
            AnswerWriter* answers = nullptr)
      : scope_(std::move(scope)),
        response_(response),
        encode_(std::move(encode)),
        answers_(answers) {}

  // A Generate answered in one message collects its events for the encoder.
  void Send(GenerationEvent event) override {
    task_->generate().events.push_back(std::move(event));
  }
  void Complete(absl::Status status) override {
    if (status.ok() && answers_ != nullptr && task_ != nullptr &&
        task_->response_bytes.bytes() > AnswerWriter::kInlineBytes) {
      answers_->Post([this] {
        *response_ = encode_(*task_);
        Finish(Recorded(absl::OkStatus()));  // may delete this at once
      });
      return;
    }
    if (status.ok()) *response_ = encode_(*task_);
    Finish(Recorded(status));  // may delete this at once
  }
  // Answers at once, without a task (Tokenize, Detokenize).
  void Answer(absl::StatusOr<grpc::ByteBuffer> answer) {
    if (answer.ok()) *response_ = *std::move(answer);
    Finish(Recorded(answer.status()));  // may delete this at once
  }
  void OnCancel() override { Cancel(); }
  void OnDone() override {
    Done();
    delete this;
  }

 private:
  grpc::Status Recorded(const absl::Status& status) {
    scope_.Finish(status);
    return ToGrpc(status);
  }

  CallScope scope_;
  grpc::ByteBuffer* const response_;
  const Encoder encode_;
  AnswerWriter* const answers_;
};

// A Generate stream. gRPC allows one write in flight, so events queue here until the previous
// one is on the wire; the status follows the last event. `encode` makes the protocol's message.
class GenerateCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                           public TaskSink,
                           public CallTask {
 public:
  using Encoder = grpc::ByteBuffer (*)(const GenerationEvent&);
  GenerateCall(CallScope scope, Encoder encode) : scope_(std::move(scope)), encode_(encode) {}

  void Send(GenerationEvent event) override;
  void Complete(absl::Status status) override;
  void OnWriteDone(bool ok) override;
  int64_t Unsent() const override { return unsent_.load(std::memory_order_relaxed); }
  void OnCancel() override { Cancel(); }
  void OnDone() override {
    Done();
    delete this;
  }

 private:
  // Starts the next write, or finishes once every event is out; returns the status to finish
  // with, which the caller passes to Finish after unlocking (Finish may delete this at once).
  std::optional<grpc::Status> Advance();

  CallScope scope_;
  const Encoder encode_;
  std::mutex mutex_;                      // guards what follows
  std::deque<grpc::ByteBuffer> pending_;  // serialized events; front: being written
  std::atomic<int64_t> unsent_{0};        // pending_.size(), for the scheduler
  bool writing_ = false;
  bool broken_ = false;  // a write failed: the client is gone
  std::optional<grpc::Status> final_status_;
  bool finished_ = false;
};

}  // namespace attnserve::server
