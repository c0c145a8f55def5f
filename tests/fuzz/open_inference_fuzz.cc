// libFuzzer target: arbitrary Open Inference Protocol (KServe v2) requests through its service,
// in process, the way a remote client reaches it: model names with and without a method,
// tensors typed or raw, parameters and requested outputs, then the same validation, scheduler
// and engine as attnserve.v1. The first byte picks the RPC (ModelInfer most often), the rest is
// its request (binary protobuf; bytes that do not parse are skipped). The repository
// (ATTNSERVE_FUZZ_MODELS) holds a causal LM, an encoder-decoder and an encoder.
//
// Every call must end with OK or a refusal that names its problem, and an answer's tensors must
// hold as many elements as their shapes say, in the encoding the request used.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "proto/inference/grpc_predict_v2.grpc.pb.h"
#include "server/open_inference_service.h"

namespace attnserve::server {
namespace {

void Require(bool condition, const std::string& what) {
  if (!condition) {
    std::fprintf(stderr, "open_inference_fuzz: %s\n", what.c_str());
    std::abort();
  }
}

struct InProcessServer {
  prometheus::Registry registry;
  ServerMetrics server_metrics{registry};
  std::unique_ptr<ModelRepository> repository;
  CallGate gate;
  std::unique_ptr<Dispatcher> dispatcher;
  std::unique_ptr<OpenInferenceService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;
};

InProcessServer* the_server = nullptr;

void RequireAnswered(const grpc::Status& status, const std::string& method) {
  const auto code = status.error_code();
  Require(code == grpc::StatusCode::OK || code == grpc::StatusCode::INVALID_ARGUMENT ||
              code == grpc::StatusCode::NOT_FOUND || code == grpc::StatusCode::RESOURCE_EXHAUSTED,
          method + " ended with code " + std::to_string(code) + ": " + status.error_message());
  Require(status.ok() || !status.error_message().empty(), method + " refused without a message");
}

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
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  const grpc::Status status = the_server->stub->ModelInfer(&context, request, &response);
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
  const grpc::Status status = the_server->stub->ModelMetadata(&context, request, &response);
  RequireAnswered(status, "ModelMetadata");
  if (status.ok()) Require(response.inputs_size() > 0, "ModelMetadata: no inputs");
}

void CallModelReady(const std::string& bytes) {
  inference::ModelReadyRequest request;
  if (!request.ParseFromString(bytes)) return;
  inference::ModelReadyResponse response;
  grpc::ClientContext context;
  RequireAnswered(the_server->stub->ModelReady(&context, request, &response), "ModelReady");
}

}  // namespace
}  // namespace attnserve::server

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace attnserve::server;
  const char* models = std::getenv("ATTNSERVE_FUZZ_MODELS");
  Require(models != nullptr, "set ATTNSERVE_FUZZ_MODELS to the fuzzing model repository");
  // Malformed messages are the point here; libprotobuf would log each one.
  google::protobuf::SetLogHandler(nullptr);
  the_server = new InProcessServer;
  WorkerOptions options;
  options.max_batch_size = 4;
  // A 2 GiB process, as deploy/k8s/base allows: the budgets refuse what would not fit in it.
  the_server->repository = ModelRepository::Load(models, options, {int64_t{2} << 30, "fuzzer"},
                                                 the_server->server_metrics);
  Require(
      the_server->repository->workers().size() == 3 && the_server->repository->failures().empty(),
      std::string("the repository at ") + models + " must hold three models that load");
  the_server->dispatcher = std::make_unique<Dispatcher>(
      *the_server->repository, the_server->server_metrics, the_server->gate);
  the_server->service = std::make_unique<OpenInferenceService>(*the_server->dispatcher);
  grpc::ServerBuilder builder;
  builder.RegisterService(the_server->service.get());
  the_server->server = builder.BuildAndStart();
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  the_server->stub =
      inference::GRPCInferenceService::NewStub(the_server->server->InProcessChannel(arguments));
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
  // Every call has ended: nothing may still hold a sequence or wait in a queue.
  const double active = SumByLabel(the_server->server_metrics.active_sequences)[""];
  const double queued = SumByLabel(the_server->server_metrics.queue_length)[""];
  Require(active == 0 && queued == 0, "a sequence or a queued request outlived its call");
  return 0;
}
