#include "server/grpc/calls.h"

#include "common/status_macros.h"

namespace attnserve::server {

absl::StatusOr<CallOrigin> OriginOf(const grpc::CallbackServerContext& context,
                                    const Admission& admission) {
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find("authorization");
  const absl::string_view authorization =
      found == metadata.end() ? absl::string_view()
                              : absl::string_view(found->second.data(), found->second.size());
  ASSIGN_OR_RETURN(std::string key, admission.Authenticate(authorization));
  return CallOrigin{absl::FromChrono(context.deadline()),
                    key.empty() ? context.peer() : std::move(key)};
}

void GenerateCall::Send(GenerationEvent event) {
  grpc::ByteBuffer bytes = encode_(event);
  std::lock_guard lock(mutex_);
  if (broken_) return;
  pending_.push_back(std::move(bytes));
  unsent_.store(static_cast<int64_t>(pending_.size()), std::memory_order_relaxed);
  if (!writing_) Advance();
}

void GenerateCall::Complete(absl::Status status) {
  std::optional<grpc::Status> finish;
  {
    std::lock_guard lock(mutex_);
    scope_.Finish(status);
    final_status_ = ToGrpc(status);
    if (!writing_) finish = Advance();
  }
  if (finish) Finish(*finish);
}

void GenerateCall::OnWriteDone(bool ok) {
  std::optional<grpc::Status> finish;
  {
    std::lock_guard lock(mutex_);
    writing_ = false;
    pending_.pop_front();
    if (!ok) {
      // The stream broke: nothing more can be sent. The scheduler frees the sequence at its
      // next step and completes the task, which finishes the call.
      Cancel();
      broken_ = true;
      pending_.clear();
    }
    unsent_.store(static_cast<int64_t>(pending_.size()), std::memory_order_relaxed);
    finish = Advance();
  }
  // A paused stream may resume now that its client read.
  if (task_) task_->Resume();
  if (finish) Finish(*finish);
}

std::optional<grpc::Status> GenerateCall::Advance() {
  if (!pending_.empty()) {
    writing_ = true;
    StartWrite(&pending_.front());  // deque elements stay put while others are added
    return std::nullopt;
  }
  if (!final_status_.has_value() || finished_) return std::nullopt;
  finished_ = true;
  return final_status_;
}

}  // namespace attnserve::server
