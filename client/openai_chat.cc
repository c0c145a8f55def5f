#include "client/openai_chat.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"

namespace attnserve::client {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// Server-sent events split into "data: ..." lines; each is a chunk of the reply, an error, or
// the end.
class EventReader {
 public:
  explicit EventReader(const std::function<void(const std::string&)>& on_text)
      : on_text_(on_text) {}

  void Feed(std::string_view bytes) {
    pending_.append(bytes);
    size_t end;
    while ((end = pending_.find("\n\n")) != std::string::npos) {
      const std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string data = event.substr(6);
      if (data == "[DONE]") continue;
      const auto json = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
      if (json.is_discarded()) continue;
      if (json.contains("error")) {
        error_ = json["error"].value("message", "the server ended the reply with an error");
        continue;
      }
      if (!json.contains("choices") || json["choices"].empty()) continue;
      const auto& delta = json["choices"][0]["delta"];
      if (delta.contains("content") && delta["content"].is_string()) {
        const std::string text = delta["content"].get<std::string>();
        reply_ += text;
        if (!text.empty()) on_text_(text);
      }
    }
  }
  const std::string& reply() const { return reply_; }
  const std::string& error() const { return error_; }

 private:
  const std::function<void(const std::string&)>& on_text_;
  std::string pending_, reply_, error_;
};

}  // namespace

absl::StatusOr<std::string> StreamChatTurn(const ChatOptions& options,
                                           const nlohmann::json& messages,
                                           const std::function<void(const std::string&)>& on_text) {
  nlohmann::json body = {{"model", options.model},
                         {"messages", messages},
                         {"temperature", options.temperature},
                         {"stream", true}};
  if (options.max_tokens > 0) body["max_tokens"] = options.max_tokens;
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code error;
  asio::ip::tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(options.host, std::to_string(options.port), error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", options.host, ": ", error.message()));
  }
  stream.expires_after(absl::ToChronoNanoseconds(options.timeout));
  stream.connect(endpoints, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", options.host, ":", options.port, ": ", error.message()));
  }
  http::request<http::string_body> request(http::verb::post, "/v1/chat/completions", 11);
  request.set(http::field::host, options.host);
  request.set(http::field::content_type, "application/json");
  request.set(http::field::accept, "text/event-stream");
  if (!options.api_key.empty())
    request.set(http::field::authorization, "Bearer " + options.api_key);
  request.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  request.prepare_payload();
  http::write(stream, request, error);
  if (error) return absl::UnavailableError(absl::StrCat("sending: ", error.message()));

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  EventReader events(on_text);
  // A streamed reply is handed over chunk by chunk; an error comes whole, as JSON.
  auto on_chunk = [&](uint64_t, beast::string_view body, beast::error_code&) -> size_t {
    if (parser.get().result() == http::status::ok) {
      events.Feed(std::string_view(body.data(), body.size()));
    }
    return body.size();
  };
  parser.on_chunk_body(on_chunk);
  http::read(stream, buffer, parser, error);
  if (error && error != http::error::end_of_stream) {
    return absl::UnavailableError(absl::StrCat("reading the reply: ", error.message()));
  }
  const auto& response = parser.get();
  if (response.result() != http::status::ok) {
    const auto json = nlohmann::json::parse(response.body(), nullptr, false);
    const std::string message = !json.is_discarded() && json.contains("error")
                                    ? json["error"].value("message", response.body())
                                    : response.body();
    return absl::InvalidArgumentError(absl::StrCat("HTTP ", response.result_int(), ": ", message));
  }
  if (!events.error().empty()) return absl::InternalError(events.error());
  return events.reply();
}

}  // namespace attnserve::client
