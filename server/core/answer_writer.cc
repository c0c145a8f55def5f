#include "server/core/answer_writer.h"

#include <pthread.h>

#include <utility>

namespace attnserve::server {

AnswerWriter::~AnswerWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

void AnswerWriter::Post(std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    work_.push_back(std::move(work));
  }
  ready_.notify_one();
}

void AnswerWriter::Run() {
  pthread_setname_np(pthread_self(), "attn-answers");
  std::unique_lock lock(mutex_);
  while (true) {
    ready_.wait(lock, [&] { return !work_.empty() || stopping_; });
    if (work_.empty()) return;  // stopping, and everything posted has run
    std::function<void()> work = std::move(work_.front());
    work_.pop_front();
    lock.unlock();
    work();
    lock.lock();
  }
}

}  // namespace attnserve::server
