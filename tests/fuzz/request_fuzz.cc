// libFuzzer target: arbitrary request messages through the Inference service, in process, the
// way a remote client reaches it: routing by model name, validation, the model's scheduler and
// the engine. The first byte picks the RPC, the rest is its request (binary protobuf; bytes that
// do not parse are skipped). The repository (ATTNSERVE_FUZZ_MODELS) holds a causal LM, an
// encoder-decoder and an encoder, so every RPC reaches a model that answers it.
//
// Every call must end with OK or a refusal that names its problem (INVALID_ARGUMENT,
// NOT_FOUND for an unknown model, RESOURCE_EXHAUSTED for a budget it can never fit), an answer
// must be what was asked for, and no sequence may stay active after its call ends.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <memory>
#include <string>

#include "proto/attnserve/v1/inference.grpc.pb.h"
#include "server/grpc/v1/inference_service.h"
#include "tests/fuzz/in_process_server.h"

namespace attnserve::server {
namespace {

InProcessServer* the_server = nullptr;
std::unique_ptr<v1::Inference::Stub> stub;

bool AllFinite(const google::protobuf::RepeatedField<float>& values) {
  for (float v : values) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

template <typename Request, typename Response>
using UnaryMethod = grpc::Status (v1::Inference::Stub::*)(grpc::ClientContext*, const Request&,
                                                          Response*);

// Parses `bytes` into `request` and makes the call, which must end as RequireAnswered says; true
// when it was answered OK, with `response` filled in.
template <typename Request, typename Response>
bool CallUnary(const std::string& bytes, const std::string& name,
               UnaryMethod<Request, Response> method, Request& request, Response& response) {
  if (!request.ParseFromString(bytes)) return false;
  grpc::ClientContext context;
  const grpc::Status status = (stub.get()->*method)(&context, request, &response);
  RequireAnswered(status, name);
  return status.ok();
}

void CallNextToken(const std::string& bytes) {
  v1::NextTokenRequest request;
  v1::NextTokenResponse response;
  if (!CallUnary(bytes, "NextToken", &v1::Inference::Stub::NextToken, request, response)) return;
  Require(response.results_size() == request.sequences_size(), "NextToken: a result per sequence");
  for (const v1::NextTokenResult& result : response.results()) {
    Require(result.top_size() > 0, "NextToken: an empty top list");
    for (int i = 0; i < result.top_size(); ++i) {
      const float p = result.top(i).probability();
      Require(p >= 0.0f && p <= 1.0f, "NextToken: a probability outside [0, 1]");
      Require(i == 0 || p <= result.top(i - 1).probability(), "NextToken: top is not sorted");
    }
  }
}

void CallScore(const std::string& bytes) {
  v1::ScoreRequest request;
  v1::ScoreResponse response;
  if (!CallUnary(bytes, "Score", &v1::Inference::Stub::Score, request, response)) return;
  for (const v1::TokenScore& token : response.tokens()) {
    Require(token.log_probability() <= 1e-5f, "Score: a log-probability above 0");
  }
}

void CallEmbed(const std::string& bytes) {
  v1::EmbedRequest request;
  v1::EmbedResponse response;
  if (!CallUnary(bytes, "Embed", &v1::Inference::Stub::Embed, request, response)) return;
  Require(
      response.embeddings_size() == std::max(request.sequences_size(), request.feature_sets_size()),
      "Embed: an embedding per input");
  for (const v1::Embedding& embedding : response.embeddings()) {
    Require(embedding.values_size() == embedding.rows() * embedding.width(),
            "Embed: values are not rows x width");
    Require(AllFinite(embedding.values()), "Embed: a value that is not finite");
  }
}

void CallGenerate(const std::string& bytes) {
  v1::GenerateRequest request;
  if (!request.ParseFromString(bytes)) return;
  // Few tokens keep each input fast; the length limits are validation's, tested at any value.
  if (request.max_tokens() == 0 || request.max_tokens() > 8) request.set_max_tokens(8);
  grpc::ClientContext context;
  auto reader = stub->Generate(&context, request);
  v1::GenerateResponse event;
  int64_t tokens = 0;
  bool finished = false;
  while (reader->Read(&event)) {
    Require(!finished, "Generate: an event after the finish");
    if (event.has_finish()) {
      finished = true;
      Require(event.finish().generated_tokens() == tokens, "Generate: finish miscounts tokens");
    } else {
      ++tokens;
    }
  }
  const grpc::Status status = reader->Finish();
  RequireAnswered(status, "Generate");
  if (status.ok()) {
    Require(finished, "Generate: OK without a finish event");
    Require(tokens <= request.max_tokens(), "Generate: more tokens than max_tokens");
  }
}

void CallGetModel(const std::string& bytes) {
  v1::GetModelRequest request;
  v1::ModelInfo response;
  CallUnary(bytes, "GetModel", &v1::Inference::Stub::GetModel, request, response);
}

}  // namespace
}  // namespace attnserve::server

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace attnserve::server;
  the_server = StartInProcessServer<InferenceService>();
  stub = attnserve::v1::Inference::NewStub(the_server->channel);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnserve::server;
  if (size == 0) return 0;
  const std::string request(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      CallNextToken(request);
      break;
    case 1:
      CallScore(request);
      break;
    case 2:
      CallEmbed(request);
      break;
    case 3:
      CallGenerate(request);
      break;
    case 4:
      CallGetModel(request);
      break;
  }
  the_server->RequireNothingOutstanding();
  return 0;
}
