// A chat request's prompt: its messages rendered by the model's chat template
// (text/chat_template/), with the tokenizer's bos_token and eos_token, as transformers'
// apply_chat_template renders them.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "server/core/engine_loop.h"
#include "server/http/openai/openai_requests.h"
#include "text/chat_template/chat_template.h"

namespace attnserve::server {

// The template a chat request renders with: the one it names, else the model's "tool_use" one
// when it gives tools and the model has one, else the model's default. INVALID_ARGUMENT when
// there is none.
absl::StatusOr<const ChatTemplate*> ChatTemplateFor(const EngineLoop& worker,
                                                    const ChatRequest& chat);

// INVALID_ARGUMENT when the model has no such template or the template refuses the messages
// (raise_exception); RESOURCE_EXHAUSTED when the rendering passes --max_text_bytes or its step
// limit.
absl::StatusOr<std::string> RenderChatPrompt(const EngineLoop& worker, const ChatRequest& chat);

}  // namespace attnserve::server
