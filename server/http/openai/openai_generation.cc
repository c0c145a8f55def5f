#include "server/http/openai/openai_generation.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace attnserve::server {

StopHoldback::StopHoldback(std::vector<std::string> stops) : stops_(std::move(stops)) {
  // The token that completes a stop sequence comes before the news that it did: its bytes are
  // held with it, so the whole sequence can be dropped.
  for (const std::string& stop : stops_) hold_ = std::max(hold_, stop.size());
}

std::string StopHoldback::Push(std::string_view text) {
  held_.append(text);
  if (held_.size() <= hold_) return "";
  size_t release = held_.size() - hold_;
  // Whole characters only: a stop sequence can begin inside a held one's bytes.
  while (release > 0 && release < held_.size() && (held_[release] & 0xC0) == 0x80) --release;
  std::string out = held_.substr(0, release);
  held_.erase(0, release);
  return out;
}

std::string StopHoldback::Finish(std::string_view tail, bool stopped) {
  if (stopped) {
    // The stop sequence ends the text the stream had made whole; what the stream still held
    // (bytes of an unfinished character) came after it.
    for (const std::string& stop : stops_) {
      if (absl::EndsWith(held_, stop)) {
        held_.resize(held_.size() - stop.size());
        break;
      }
    }
    return std::exchange(held_, "");
  }
  held_.append(tail);
  return std::exchange(held_, "");
}

void GenerationJob::Choice::Attach(std::shared_ptr<Task> task) { task_ = std::move(task); }

void GenerationJob::Choice::Send(GenerationEvent event) { job_.OnEvent(*this, std::move(event)); }

void GenerationJob::Choice::Complete(absl::Status status) {
  // The job may go with the last choice's reference, this choice with it: nothing is touched
  // after.
  std::shared_ptr<GenerationJob> keep = std::move(keep_);
  if (gate_ != nullptr) gate_->Leave();
  keep->OnComplete(*this, std::move(status));
}

int64_t GenerationJob::Choice::Unsent() const {
  return job_.options_.stream ? job_.responder_->Unsent() : 0;
}

GenerationJob::GenerationJob(Options options, const Tokenizer& tokenizer,
                             std::shared_ptr<HttpResponder> responder, CallScope scope)
    : options_(std::move(options)),
      tokenizer_(tokenizer),
      responder_(std::move(responder)),
      scope_(std::move(scope)) {
  for (int64_t i = 0; i < options_.choices; ++i) {
    choices_.push_back(std::make_unique<Choice>(*this, i));
    choices_.back()->holdback_.emplace(options_.stop);
    if (options_.tools)
      choices_.back()->tools_.emplace(options_.tools->format, options_.tools->function);
    choices_.back()->text_.index = i;
  }
  prompt_tokens_.assign((options_.choices + options_.n - 1) / options_.n, 0);
}

std::string ToolCallReader::Push(std::string_view text, bool stream) {
  answer_ += text;
  if (!stream || !function_.empty()) return "";
  const size_t safe = std::max(given_, tool_calls::ContentPrefix(format_, answer_));
  std::string out = answer_.substr(given_, safe - given_);
  given_ = safe;
  return out;
}

tool_calls::ParsedAnswer ToolCallReader::Finish() {
  std::string_view rest = std::string_view(answer_).substr(given_);
  if (!function_.empty()) {
    // The answer was constrained to the function's parameters: it is the call's arguments.
    return {.content = "", .calls = {{.name = function_, .arguments = std::string(rest)}}};
  }
  return tool_calls::Parse(format_, rest);
}

bool GenerationJob::failed() {
  std::lock_guard lock(mutex_);
  return !error_.ok();
}

void GenerationJob::Started(int64_t handed) {
  std::lock_guard lock(mutex_);
  started_ = true;
  for (int64_t i = handed; i < options_.choices; ++i) {
    choices_[i]->done_ = true;
    ++done_;
  }
  if (!error_.ok()) {
    CancelAll();
  } else if (options_.stream) {
    responder_->StartStream(200, "text/event-stream");
    streaming_ = true;
    std::vector<ChoiceText> opening;
    for (auto& choice : choices_) {
      // Chat streams open with the role; completions with the echoed prompt, if asked.
      if (options_.api == Api::kChat || !choice->prefix_.empty()) {
        ChoiceText text;
        text.index = choice->index_;
        text.text = std::exchange(choice->prefix_, "");
        opening.push_back(std::move(text));
      }
    }
    if (!opening.empty()) SendChunk(opening, /*first=*/true, std::nullopt);
  }
  Flush();
}

void GenerationJob::OnEvent(Choice& choice, GenerationEvent event) {
  std::lock_guard lock(mutex_);
  ChoiceText& text = choice.text_;
  if (!event.finished) {
    const std::string out = choice.holdback_->Push(event.text);
    text.text += choice.tools_ ? choice.tools_->Push(out, options_.stream) : out;
    if (options_.logprobs) text.tokens.push_back(std::move(event));
  } else {
    const std::string out =
        choice.holdback_->Finish(event.text, event.reason == FinishReason::kStopSequence);
    if (choice.tools_) {
      choice.tools_->Push(out, /*stream=*/false);
      tool_calls::ParsedAnswer parsed = choice.tools_->Finish();
      text.text += parsed.content;
      text.tool_calls = std::move(parsed.calls);
    } else {
      text.text += out;
    }
    text.finish = event.reason;
    prompt_tokens_[choice.index_ / options_.n] = event.prompt_tokens;
    completion_tokens_ += event.generated_tokens;
  }
  if (options_.stream) Flush();
}

void GenerationJob::OnComplete(Choice& choice, absl::Status status) {
  std::lock_guard lock(mutex_);
  choice.done_ = true;
  ++done_;
  if (!status.ok() && error_.ok()) {
    error_ = std::move(status);
    if (started_) CancelAll();  // else Started does, once every choice was handed over
  }
  Flush();
}

void GenerationJob::Cancel() {
  std::lock_guard lock(mutex_);
  CancelAll();
}

void GenerationJob::Resume() {
  std::lock_guard lock(mutex_);
  for (auto& choice : choices_) {
    if (!choice->done_ && choice->task_) choice->task_->Resume();
  }
}

void GenerationJob::CancelAll() {
  for (auto& choice : choices_) {
    if (choice->done_ || !choice->task_) continue;
    choice->task_->Cancel();
  }
}

void GenerationJob::SendChunk(const std::vector<ChoiceText>& choices, bool first,
                              std::optional<Usage> usage) {
  const std::string json =
      options_.api == Api::kChat
          ? ChatChunk(options_.header, choices, first, options_.logprobs, usage, tokenizer_)
          : CompletionChunk(options_.header, choices, options_.logprobs, usage, tokenizer_);
  responder_->Chunk(Event(json));
}

Usage GenerationJob::TotalUsage() const {
  Usage usage{.completion_tokens = completion_tokens_};
  for (int64_t tokens : prompt_tokens_) usage.prompt_tokens += tokens;
  return usage;
}

void GenerationJob::Flush() {
  if (!started_ || answered_) return;
  const bool all_done = done_ == options_.choices;
  // Whole answers, and streams refused before they started: one answer once all are done.
  if (!streaming_) {
    if (!all_done) return;
    answered_ = true;
    scope_.Finish(error_);
    if (!error_.ok())
      return responder_->Respond(HttpStatusOf(error_), "application/json", ErrorBody(error_));
    std::vector<ChoiceText> texts;
    for (auto& choice : choices_) {
      ChoiceText text = std::move(choice->text_);
      text.text.insert(0, choice->prefix_);
      texts.push_back(std::move(text));
    }
    const Usage usage = TotalUsage();
    return responder_->Respond(
        200, "application/json",
        options_.api == Api::kChat
            ? ChatBody(options_.header, texts, options_.logprobs, usage, tokenizer_)
            : CompletionBody(options_.header, texts, options_.logprobs, usage, tokenizer_));
  }
  for (auto& choice : choices_) {
    ChoiceText& pending = choice->text_;
    if (pending.text.empty() && pending.tokens.empty() && !pending.finish &&
        pending.tool_calls.empty()) {
      continue;
    }
    SendChunk({pending}, /*first=*/false, std::nullopt);
    pending.text.clear();
    pending.tokens.clear();
    pending.finish.reset();
    pending.tool_calls.clear();
  }
  if (!all_done) return;
  answered_ = true;
  scope_.Finish(error_);
  if (!error_.ok()) responder_->Chunk(Event(ErrorBody(error_)));
  if (options_.include_usage && error_.ok()) SendChunk({}, /*first=*/false, TotalUsage());
  responder_->Chunk("data: [DONE]\n\n");
  responder_->EndStream();
}

}  // namespace attnserve::server
