// A thread that builds and sends answers off the engine loops' threads: every streamed
// generation's events and endings (server/core/step_answers.h), and unary answers too large to
// encode inline. Encoding megabytes of embeddings or distributions, or the protobuf messages and
// server-sent events of dozens of streams, on an engine thread would delay every request's next
// step; a small unary answer is sent inline instead, since a thread hand-off costs a lone
// request more than its encoding.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace attnserve::server {

class AnswerWriter {
 public:
  // Answers admitted with a larger bound than this are built here.
  static constexpr int64_t kInlineBytes = int64_t{64} << 10;

  AnswerWriter() : thread_([this] { Run(); }) {}
  // Runs everything posted, then joins.
  ~AnswerWriter();
  AnswerWriter(const AnswerWriter&) = delete;
  AnswerWriter& operator=(const AnswerWriter&) = delete;

  // Runs `work` on the writer's thread, in the order posted. Any thread.
  void Post(std::function<void()> work);

 private:
  void Run();

  std::mutex mutex_;  // guards what follows
  std::condition_variable ready_;
  std::deque<std::function<void()>> work_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace attnserve::server
