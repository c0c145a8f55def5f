#include "server/core/step_answers.h"

namespace attnserve::server {

void StepAnswers::Event(const std::shared_ptr<Task>& task, GenerationEvent event) {
  task->undelivered.fetch_add(1, std::memory_order_relaxed);
  answers_.push_back({task, std::move(event), absl::OkStatus()});
}

void StepAnswers::End(std::shared_ptr<Task> task, absl::Status status) {
  answers_.push_back({std::move(task), std::nullopt, std::move(status)});
}

void StepAnswers::Deliver() {
  for (Answer& answer : answers_) {
    if (answer.event) {
      answer.task->Send(*std::move(answer.event));
      answer.task->undelivered.fetch_sub(1, std::memory_order_relaxed);
    } else {
      answer.task->Finish(std::move(answer.status));
    }
  }
  answers_.clear();
}

}  // namespace attnserve::server
