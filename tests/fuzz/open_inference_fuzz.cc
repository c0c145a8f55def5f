// libFuzzer target: arbitrary Open Inference Protocol (KServe v2) requests through its service,
// in process, the way a remote client reaches it: model names with and without a method,
// tensors typed or raw, parameters and requested outputs, then the same validation, scheduler
// and engine as attnserve.v1. The first byte picks the RPC (ModelInfer most often), the rest is
// its request (binary protobuf; bytes that do not parse are skipped). The repository
// (ATTNSERVE_FUZZ_MODELS) holds a causal LM, an encoder-decoder and an encoder.
//
// Every call must end with OK or a refusal that names its problem, and an answer's tensors must
// hold as many elements as their shapes say, in the encoding the request used.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "proto/inference/grpc_predict_v2.grpc.pb.h"
#include "server/grpc/open_inference/open_inference_service.h"
#include "tests/fuzz/in_process_server.h"

namespace attnserve::server {
namespace {

InProcessServer* the_server = nullptr;
std::unique_ptr<inference::GRPCInferenceService::Stub> stub;

// Elements a tensor's contents hold in the field of its datatype.
int64_t TypedElements(const inference::ModelInferResponse::InferOutputTensor& tensor) {
  const inference::InferTensorContents& c = tensor.contents();
  if (tensor.datatype() == "INT64") return c.int64_contents_size();
  if (tensor.datatype() == "FP32") return c.fp32_contents_size();
  if (tensor.datatype() == "FP64") return c.fp64_contents_size();
  if (tensor.datatype() == "BYTES") return c.bytes_contents_size();
  Require(false, "an output of datatype " + tensor.datatype());
  return 0;
}

// Elements in a raw tensor of `datatype`.
int64_t RawElements(const std::string& raw, const std::string& datatype) {
  if (datatype != "BYTES") return raw.size() / (datatype == "FP32" ? 4 : 8);
  int64_t elements = 0;
  for (size_t at = 0; at < raw.size(); ++elements) {
    Require(at + 4 <= raw.size(), "a raw BYTES output cut inside a length");
    uint32_t length = 0;
    for (int i = 3; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(raw[at + i]);
    at += 4 + length;
    Require(at <= raw.size(), "a raw BYTES output longer than its bytes");
  }
  return elements;
}

void CallModelInfer(const std::string& bytes) {
  inference::ModelInferRequest request;
  if (!request.ParseFromString(bytes)) return;
  // Few generated tokens keep each input fast; the limits are validation's, tested at any value.
  if (request.model_name().ends_with("/generate")) {
    inference::InferParameter& max_tokens = (*request.mutable_parameters())["max_tokens"];
    if (!max_tokens.has_int64_param() || max_tokens.int64_param() <= 0 ||
        max_tokens.int64_param() > 8) {
      max_tokens.set_int64_param(8);
    }
  }
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub->ModelInfer(&context, request, &response);
  RequireAnswered(status, "ModelInfer");
  if (!status.ok()) return;
  Require(response.id() == request.id(), "ModelInfer: the id is not echoed");
  Require(response.outputs_size() > 0, "ModelInfer: no outputs");
  const bool raw = request.raw_input_contents_size() > 0;
  Require(response.raw_output_contents_size() == (raw ? response.outputs_size() : 0),
          "ModelInfer: raw outputs for typed inputs, or the other way round");
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& tensor = response.outputs(i);
    int64_t elements = 1;
    for (int64_t dim : tensor.shape()) elements *= dim;
    const int64_t found = raw ? RawElements(response.raw_output_contents(i), tensor.datatype())
                              : TypedElements(tensor);
    Require(found == elements, "ModelInfer: output " + tensor.name() + " does not fill its shape");
  }
}

void CallModelMetadata(const std::string& bytes) {
  inference::ModelMetadataRequest request;
  if (!request.ParseFromString(bytes)) return;
  inference::ModelMetadataResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub->ModelMetadata(&context, request, &response);
  RequireAnswered(status, "ModelMetadata");
  if (status.ok()) Require(response.inputs_size() > 0, "ModelMetadata: no inputs");
}

void CallModelReady(const std::string& bytes) {
  inference::ModelReadyRequest request;
  if (!request.ParseFromString(bytes)) return;
  inference::ModelReadyResponse response;
  grpc::ClientContext context;
  RequireAnswered(stub->ModelReady(&context, request, &response), "ModelReady");
}

}  // namespace
}  // namespace attnserve::server

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace attnserve::server;
  the_server = StartInProcessServer<OpenInferenceService>();
  stub = inference::GRPCInferenceService::NewStub(the_server->channel);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnserve::server;
  if (size == 0) return 0;
  const std::string request(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 8) {
    case 0:
      CallModelMetadata(request);
      break;
    case 1:
      CallModelReady(request);
      break;
    default:
      CallModelInfer(request);
      break;
  }
  the_server->RequireNothingOutstanding();
  return 0;
}
