// A chat request's prompt: its messages rendered by the model's chat template
// (text/chat_template/), with the tokenizer's bos_token and eos_token, as transformers'
// apply_chat_template renders them.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "server/core/engine_loop.h"
#include "server/http/openai/openai_requests.h"

namespace attnserve::server {

// INVALID_ARGUMENT when the model has no such template or the template refuses the messages
// (raise_exception); RESOURCE_EXHAUSTED when the rendering passes --max_text_bytes or its step
// limit.
absl::StatusOr<std::string> RenderChatPrompt(const EngineLoop& worker, const ChatRequest& chat);

}  // namespace attnserve::server
