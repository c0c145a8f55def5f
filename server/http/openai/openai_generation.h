// One completions or chat completions request of the OpenAI-compatible API: its prompts × n
// choices, each a Generate task of the core, answered together as one JSON body, or streamed as
// server-sent events as the choices' tokens come. Stop sequences are held back until it is
// known they do not end the choice (OpenAI's answers leave them out). A client that goes away
// cancels every choice.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/core/call_gate.h"
#include "server/core/task.h"
#include "server/http/http_server.h"
#include "server/http/openai/openai_responses.h"
#include "server/ops/call_scope.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tool_calls/tool_call_format.h"

namespace attnserve::server {

// Holds back the end of a choice's text that could be the start of a stop sequence.
class StopHoldback {
 public:
  explicit StopHoldback(std::vector<std::string> stops);
  // The text that can go out now.
  std::string Push(std::string_view text);
  // The rest, without the stop sequence that ended the choice (when `stopped`).
  std::string Finish(std::string_view tail, bool stopped);

 private:
  std::vector<std::string> stops_;
  size_t hold_ = 0;
  std::string held_;
};

// One chat choice's answer read for tool calls: content streams until a call may begin; the
// rest is held and read as calls at the end (tool_calls/tool_call_format.h).
class ToolCallReader {
 public:
  // `function`: a named tool_choice, whose answer is that function's arguments.
  ToolCallReader(tool_calls::Format format, std::string function)
      : format_(format), function_(std::move(function)) {}
  // What can go out as content now (streams only; whole answers are read at the end).
  std::string Push(std::string_view text, bool stream);
  // The content not yet given out, and the calls.
  tool_calls::ParsedAnswer Finish();

 private:
  const tool_calls::Format format_;
  const std::string function_;
  std::string answer_;
  size_t given_ = 0;  // bytes of answer_ given out as content
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  enum class Api { kCompletions, kChat };
  // Chat with tools: how the model writes calls, and the function a named tool_choice forces.
  struct Tools {
    tool_calls::Format format = tool_calls::Format::kGeneric;
    std::string function;
  };
  struct Options {
    Api api = Api::kCompletions;
    AnswerHeader header;
    bool stream = false;
    bool include_usage = false;
    bool logprobs = false;
    int64_t choices = 1;
    int64_t n = 1;  // choices per prompt
    std::vector<std::string> stop;
    std::optional<Tools> tools;
  };

  // The sink of one choice's task, as Admission::Start takes it.
  class Choice final : public TaskSink {
   public:
    Choice(GenerationJob& job, int64_t index) : job_(job), index_(index) {}
    void Admitted(CallGate* gate) {
      gate_ = gate;
      keep_ = job_.shared_from_this();
    }
    void Attach(std::shared_ptr<Task> task);
    void Send(GenerationEvent event) override;
    void Complete(absl::Status status) override;
    int64_t Unsent() const override;

   private:
    friend class GenerationJob;
    GenerationJob& job_;
    const int64_t index_;
    CallGate* gate_ = nullptr;
    std::shared_ptr<Task> task_;
    std::shared_ptr<GenerationJob> keep_;  // the job lives while a choice's task does
    std::optional<StopHoldback> holdback_;
    std::optional<ToolCallReader> tools_;
    std::string prefix_;  // echo: the prompt's text, first
    ChoiceText text_;     // collected (whole answers) or not yet sent (streams)
    bool done_ = false;
  };

  GenerationJob(Options options, const Tokenizer& tokenizer,
                std::shared_ptr<HttpResponder> responder, CallScope scope);

  // Before its task starts: the choice to hand to Admission::Start, and the prompt's text that
  // echo puts first.
  Choice* choice(int64_t index) { return choices_[index].get(); }
  void Echo(int64_t index, std::string prefix) { choices_[index]->prefix_ = std::move(prefix); }
  // The client went away: every choice's task is cancelled.
  void Cancel();
  // The client read: paused choices may go on.
  void Resume();
  // A choice handed over was refused at once: hand over no more.
  bool failed();
  // Once the first `handed` choices were handed over (the rest never will be): answers a
  // refusal, or starts the stream.
  void Started(int64_t handed);

 private:
  void OnEvent(Choice& choice, GenerationEvent event);
  void OnComplete(Choice& choice, absl::Status status);
  void CancelAll();
  // With mutex_ held: sends what a stream has, and ends the answer once every choice is done.
  void Flush();
  void SendChunk(const std::vector<ChoiceText>& choices, bool first, std::optional<Usage> usage);
  Usage TotalUsage() const;

  const Options options_;
  const Tokenizer& tokenizer_;
  const std::shared_ptr<HttpResponder> responder_;
  CallScope scope_;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::mutex mutex_;  // guards what follows
  bool started_ = false;
  bool streaming_ = false;  // the stream's header went out
  bool answered_ = false;
  int64_t done_ = 0;
  absl::Status error_;
  std::vector<int64_t> prompt_tokens_;  // per prompt
  int64_t completion_tokens_ = 0;
};

}  // namespace attnserve::server
