// The Open Inference Protocol's tensors (KServe v2, proto/inference/grpc_predict_v2.proto) in
// and out: a request's input tensors checked against their datatypes and shapes, whether they
// come typed (`contents`) or as raw little-endian bytes (`raw_input_contents`), and a response's
// output tensors written the way the request came (raw for raw, typed for typed).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/inference/grpc_predict_v2.pb.h"

namespace attnserve::server {

// A request's input tensors, each checked: a known datatype, a shape of non-negative
// dimensions, and exactly as many elements as the shape says in the field its datatype uses.
// Reads nothing it has not checked; holds views into the request, which must outlive it.
class InferInputs {
 public:
  // INVALID_ARGUMENT naming the tensor and the problem; `allowed` names every input the model
  // takes, and any other is refused.
  static absl::StatusOr<InferInputs> Read(const inference::ModelInferRequest& request,
                                          std::span<const std::string> allowed);

  bool Has(const std::string& name) const { return Find(name) != nullptr; }
  // The tensor's shape; the tensor must exist.
  std::vector<int64_t> Shape(const std::string& name) const;
  // The elements, row-major; INVALID_ARGUMENT if the tensor's datatype is not the one asked for
  // (Integers takes INT64 and INT32).
  absl::StatusOr<std::vector<std::string>> Strings(const std::string& name) const;
  absl::StatusOr<std::vector<int64_t>> Integers(const std::string& name) const;
  absl::StatusOr<std::vector<float>> Floats(const std::string& name) const;
  // The request carried its inputs as raw bytes.
  bool raw() const { return raw_; }

 private:
  struct Input {
    const inference::ModelInferRequest::InferInputTensor* tensor;
    std::string_view raw;  // raw_input_contents' entry; empty when typed
    int64_t elements;
  };
  const Input* Find(const std::string& name) const;

  std::vector<Input> inputs_;
  bool raw_ = false;
};

// The output tensors a request asked for (every one the method has when it named none), added
// to the response in the encoding of the request's inputs.
class InferOutputs {
 public:
  // INVALID_ARGUMENT for an output the method does not have (naming those it has), one asked
  // for twice, or output parameters (such as Triton's "classification"), which none take.
  static absl::StatusOr<InferOutputs> Select(const inference::ModelInferRequest& request,
                                             std::span<const std::string> available, bool raw);

  bool Wants(const std::string& name) const;
  void AddIntegers(const std::string& name, std::vector<int64_t> shape,
                   std::span<const int64_t> values, inference::ModelInferResponse& response) const;
  void AddFloats(const std::string& name, std::vector<int64_t> shape, std::span<const float> values,
                 inference::ModelInferResponse& response) const;
  void AddDoubles(const std::string& name, std::vector<int64_t> shape,
                  std::span<const double> values, inference::ModelInferResponse& response) const;
  void AddStrings(const std::string& name, std::vector<int64_t> shape,
                  std::span<const std::string> values,
                  inference::ModelInferResponse& response) const;

 private:
  // A numeric output: raw bytes, or the typed field `typed` of its contents.
  template <typename T>
  void AddNumbers(const std::string& name, const char* datatype, const std::vector<int64_t>& shape,
                  std::span<const T> values,
                  google::protobuf::RepeatedField<T>* (inference::InferTensorContents::*typed)(),
                  inference::ModelInferResponse& response) const;
  // A new output tensor in the response, if wanted; nullptr otherwise.
  inference::ModelInferResponse::InferOutputTensor* Add(
      const std::string& name, const char* datatype, const std::vector<int64_t>& shape,
      inference::ModelInferResponse& response) const;

  std::vector<std::string> wanted_;
  bool raw_ = false;
};

}  // namespace attnserve::server
