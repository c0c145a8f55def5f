// A chat with a server's OpenAI-compatible API (docs/openai.md), for `attn chat`: one turn at a
// time over HTTP/1.1, the reply streamed as server-sent events and handed over as it comes.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace attnserve::client {

struct ChatOptions {
  std::string host = "localhost";
  int port = 8000;
  std::string model;
  int64_t max_tokens = 0;  // 0: the server's default (the room the context leaves)
  double temperature = 0.7;
  absl::Duration timeout = absl::Seconds(120);
  std::string api_key;  // sent as `Authorization: Bearer <key>` when not empty
};

// Sends `messages` (OpenAI's chat messages) and calls `on_text` with each piece of the reply;
// returns the whole reply, or the server's error message.
absl::StatusOr<std::string> StreamChatTurn(const ChatOptions& options,
                                           const nlohmann::json& messages,
                                           const std::function<void(const std::string&)>& on_text);

}  // namespace attnserve::client
