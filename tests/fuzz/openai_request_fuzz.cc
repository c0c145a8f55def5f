// libFuzzer target: arbitrary bodies through the HTTP port's APIs (OpenAI's and vLLM's,
// text-embeddings-inference's), in process, as the HTTP server hands them over: the first byte
// picks the endpoint, the rest is the body (JSON or not). The repository (ATTNSERVE_FUZZ_MODELS)
// holds a causal LM, an encoder-decoder and an encoder, without chat templates (a chat call is
// refused naming that, after its body is read).
//
// Every call must be answered once: 200 with a JSON body or a stream of events ending in
// `data: [DONE]`, or an error in OpenAI's shape with a status that names a refusal (400, 404,
// 405, 413, 429), or in TEI's for its endpoints (422 too), never a crash, a 500 or silence; and
// nothing may be left queued or running.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "server/grpc/v1/inference_service.h"
#include "server/http/http_apis.h"
#include "server/http/open_inference/open_inference_rest.h"
#include "server/http/openai/openai_service.h"
#include "server/http/tei/tei_service.h"
#include "tests/fuzz/in_process_server.h"

namespace attnserve::server {
namespace {

InProcessServer* the_server = nullptr;
HttpApis* service = nullptr;

// Records the answer, from whichever thread gives it.
class RecordingResponder final : public HttpResponder {
 public:
  using HttpResponder::Respond;
  void Respond(int status, std::string content_type, std::string body, HttpHeaders) override {
    std::lock_guard lock(mutex_);
    Require(!answered_, "answered twice");
    status_ = status;
    content_type_ = std::move(content_type);
    body_ = std::move(body);
    answered_ = true;
    done_.notify_all();
  }
  void StartStream(int status, std::string content_type) override {
    std::lock_guard lock(mutex_);
    Require(!answered_ && !streaming_, "a stream started after an answer");
    Require(status == 200 && content_type == "text/event-stream", "a stream's header");
    streaming_ = true;
  }
  void Chunk(std::string data) override {
    std::lock_guard lock(mutex_);
    Require(streaming_ && !answered_, "a chunk outside a stream");
    Require(data.rfind("data: ", 0) == 0 && data.size() >= 8 &&
                data.compare(data.size() - 2, 2, "\n\n") == 0,
            "a chunk that is not a server-sent event: " + data.substr(0, 64));
    body_ += data;
  }
  void EndStream() override {
    std::lock_guard lock(mutex_);
    Require(streaming_ && !answered_, "a stream ended twice");
    Require(body_.size() >= 14 && body_.compare(body_.size() - 14, 14, "data: [DONE]\n\n") == 0,
            "a stream that does not end with data: [DONE]");
    status_ = 200;
    answered_ = true;
    done_.notify_all();
  }
  int64_t Unsent() const override { return 0; }
  void OnGone(std::function<void()>) override {}
  void OnWritten(std::function<void()>) override {}

  // Waits for the answer, then checks it: an error in the shape of `api`'s errors.
  enum class Api { kOpenAi, kTei, kOpenInference };
  void RequireAnswer(const std::string& what, Api api) {
    std::unique_lock lock(mutex_);
    Require(done_.wait_for(lock, std::chrono::seconds(60), [&] { return answered_; }),
            what + " was not answered within 60 s");
    if (streaming_) return;
    if (content_type_ == "application/octet-stream") return;  // binary tensor data
    Require(content_type_ == "application/json", what + " answered " + content_type_);
    const auto body = nlohmann::json::parse(body_, nullptr, /*allow_exceptions=*/false);
    Require(!body.is_discarded(), what + " answered invalid JSON: " + body_.substr(0, 200));
    if (status_ == 200) return;
    if (api == Api::kOpenInference) {
      Require(status_ == 400 || status_ == 404 || status_ == 413 || status_ == 429,
              what + " answered " + std::to_string(status_) + ": " + body_.substr(0, 300));
      Require(body.contains("error") && body["error"].is_string(),
              what + " answered an error not in the protocol's shape: " + body_.substr(0, 300));
      return;
    }
    if (api == Api::kTei) {
      Require(status_ == 413 || status_ == 422 || status_ == 429 || status_ == 404,
              what + " answered " + std::to_string(status_) + ": " + body_.substr(0, 300));
      Require(body.contains("error") && body["error"].is_string() && body.contains("error_type"),
              what + " answered an error not in TEI's shape: " + body_.substr(0, 300));
      return;
    }
    Require(status_ == 400 || status_ == 404 || status_ == 405 || status_ == 413 || status_ == 429,
            what + " answered " + std::to_string(status_) + ": " + body_.substr(0, 300));
    Require(body.contains("error") && body["error"].value("code", 0) == status_ &&
                !body["error"].value("message", "").empty(),
            what + " answered an error not in OpenAI's shape: " + body_.substr(0, 300));
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool answered_ = false, streaming_ = false;
  int status_ = 0;
  std::string content_type_, body_;
};

}  // namespace
}  // namespace attnserve::server

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace attnserve::server;
  the_server = StartInProcessServer<InferenceService>();
  static OpenAiService openai(*the_server->admission);
  static TeiService tei(*the_server->admission);
  static OpenInferenceRest open_inference(*the_server->admission);
  service = new HttpApis(*the_server->admission, {&tei, &openai, &open_inference});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnserve::server;
  if (size == 0) return 0;
  // The last six are TEI's, but for /v1/rerank and /v1/score; the sixth and the last are GETs.
  static const char* const kPaths[] = {"/v1/completions", "/v1/chat/completions",
                                       "/v1/embeddings",  "/tokenize",
                                       "/detokenize",     "/v1/models",
                                       "/v1/rerank",      "/v1/score",
                                       "/embed",          "/rerank",
                                       "/predict",        "/info"};
  const int endpoint = data[0] % 12;
  const char* path = kPaths[endpoint];
  HttpRequest request;
  request.method = endpoint == 5 || endpoint == 11 ? "GET" : "POST";
  request.target = path;
  request.client = "ipv4:127.0.0.1:1";
  request.body.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto parsed = nlohmann::json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  const bool request_body_has_inputs = parsed.is_object() && parsed.contains("inputs");
  auto responder = std::make_shared<RecordingResponder>();
  service->Handle(std::move(request), responder);
  // vLLM's /tokenize and TEI's share the path: TEI's takes "inputs".
  using Api = RecordingResponder::Api;
  const Api api = endpoint >= 12 ? Api::kOpenInference
                  : endpoint >= 8 || (endpoint == 3 && request_body_has_inputs) ? Api::kTei
                                                                                : Api::kOpenAi;
  responder->RequireAnswer(path, api);
  // The scheduler frees what ended before the answer goes out (docs/serving.md).
  the_server->RequireNothingOutstanding();
  return 0;
}
