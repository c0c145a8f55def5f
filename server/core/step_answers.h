// What one engine step answers: streamed generations' events, and the requests that ended
// (finished, failed, cancelled, expired), in the order the step made them. The engine thread
// collects them and hands them over whole (to the answer writer's thread, when the loop has
// one), then goes back to computing: turning them into a protocol's messages (protobuf, JSON,
// server-sent events) and writing them is done by the thread that delivers them.
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/core/results.h"
#include "server/core/task.h"

namespace attnserve::server {

class StepAnswers {
 public:
  // An event of a generation; counted as unsent by its task until delivered.
  void Event(const std::shared_ptr<Task>& task, GenerationEvent event);
  // A request's end, after its events.
  void End(std::shared_ptr<Task> task, absl::Status status);
  bool empty() const { return answers_.empty(); }
  int64_t size() const { return static_cast<int64_t>(answers_.size()); }

  // Hands every answer to its task's sink, in order. Once, on any thread.
  void Deliver();

 private:
  struct Answer {
    std::shared_ptr<Task> task;
    std::optional<GenerationEvent> event;  // else the end
    absl::Status status;
  };
  std::vector<Answer> answers_;
};

}  // namespace attnserve::server
