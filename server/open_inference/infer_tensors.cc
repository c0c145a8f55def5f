#include "server/open_inference/infer_tensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace attnserve::server {
namespace {

using InputTensor = inference::ModelInferRequest::InferInputTensor;

// Bytes per element of each fixed-size datatype; 0 for BYTES; -1 for a name the protocol does
// not have.
int ElementBytes(std::string_view datatype) {
  static constexpr std::pair<std::string_view, int> kSizes[] = {
      {"BOOL", 1},   {"UINT8", 1}, {"INT8", 1},   {"UINT16", 2}, {"INT16", 2},
      {"FP16", 2},   {"BF16", 2},  {"UINT32", 4}, {"INT32", 4},  {"FP32", 4},
      {"UINT64", 8}, {"INT64", 8}, {"FP64", 8},   {"BYTES", 0}};
  for (const auto& [name, bytes] : kSizes) {
    if (name == datatype) return bytes;
  }
  return -1;
}

// How many elements the typed contents hold in the field that `datatype` uses; -1 when
// it can only be sent raw (FP16, BF16).
int64_t TypedElements(const InputTensor& tensor) {
  const inference::InferTensorContents& c = tensor.contents();
  const std::string& t = tensor.datatype();
  if (t == "BOOL") return c.bool_contents_size();
  if (t == "INT8" || t == "INT16" || t == "INT32") return c.int_contents_size();
  if (t == "INT64") return c.int64_contents_size();
  if (t == "UINT8" || t == "UINT16" || t == "UINT32") return c.uint_contents_size();
  if (t == "UINT64") return c.uint64_contents_size();
  if (t == "FP32") return c.fp32_contents_size();
  if (t == "FP64") return c.fp64_contents_size();
  if (t == "BYTES") return c.bytes_contents_size();
  return -1;
}

template <typename T>
T LittleEndian(const char* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));  // x86-64 and aarch64 are little-endian
  return value;
}

// The elements of a raw BYTES tensor: each a 4-byte little-endian length, then that many bytes.
// Passed to `element` one by one; their count.
template <typename Element>
absl::StatusOr<int64_t> SplitRawBytes(std::string_view raw, const std::string& name,
                                      Element element) {
  int64_t elements = 0;
  while (!raw.empty()) {
    if (raw.size() < 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", name, "': raw BYTES end inside the length of element ", elements));
    }
    const uint32_t length = LittleEndian<uint32_t>(raw.data());
    raw.remove_prefix(4);
    if (length > raw.size()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "': raw BYTES element ",
                                                     elements, " says ", length,
                                                     " bytes, but only ", raw.size(), " follow"));
    }
    element(raw.substr(0, length));
    ++elements;
    raw.remove_prefix(length);
  }
  return elements;
}

absl::Status WrongType(const std::string& name, const std::string& datatype,
                       const std::string& wanted) {
  return absl::InvalidArgumentError(
      absl::StrCat("input '", name, "' has datatype ", datatype, "; it takes ", wanted));
}

}  // namespace

absl::StatusOr<InferInputs> InferInputs::Read(const inference::ModelInferRequest& request,
                                              std::span<const std::string> allowed) {
  InferInputs inputs;
  const int raw_count = request.raw_input_contents_size();
  inputs.raw_ = raw_count > 0;
  if (inputs.raw_ && raw_count != request.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat("raw_input_contents has ", raw_count,
                                                   " entries for ", request.inputs_size(),
                                                   " inputs; it needs one per input, in order"));
  }
  for (int i = 0; i < request.inputs_size(); ++i) {
    const InputTensor& tensor = request.inputs(i);
    const std::string& name = tensor.name();
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[", i, "]: this model has no input named '", name.substr(0, 64),
                       "'; it takes ", absl::StrJoin(allowed, ", ")));
    }
    if (inputs.Find(name) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is given twice"));
    }
    const int element_bytes = ElementBytes(tensor.datatype());
    if (element_bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "': '", tensor.datatype().substr(0, 32),
                       "' is not an Open Inference Protocol datatype"));
    }
    // Bounded well below overflow: the contents must match, and no message holds more.
    constexpr int64_t kMaxElements = int64_t{1} << 40;
    int64_t elements = 1;
    bool empty = false;
    for (const int64_t dim : tensor.shape()) {
      if (dim < 0) {
        return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has shape [",
                                                       absl::StrJoin(tensor.shape(), ", "),
                                                       "]; dimensions must not be negative"));
      }
      if (dim == 0) {
        empty = true;
      } else {
        elements = elements > kMaxElements / dim ? kMaxElements + 1 : elements * dim;  // saturates
      }
    }
    if (empty) elements = 0;
    Input input{&tensor, {}, elements};
    int64_t found = 0;
    if (inputs.raw_) {
      if (tensor.has_contents()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", name, "' has contents although the request uses raw_input_contents"));
      }
      input.raw = request.raw_input_contents(i);
      if (element_bytes == 0) {
        ASSIGN_OR_RETURN(auto counted, SplitRawBytes(input.raw, name, [](std::string_view) {}));
        found = counted;
      } else if (input.raw.size() % element_bytes != 0) {
        return absl::InvalidArgumentError(absl::StrCat("input '", name, "': ", input.raw.size(),
                                                       " raw bytes are not a whole number of ",
                                                       tensor.datatype(), " elements"));
      } else {
        found = static_cast<int64_t>(input.raw.size()) / element_bytes;
      }
    } else {
      found = TypedElements(tensor);
      if (found < 0) {
        return absl::InvalidArgumentError(absl::StrCat("input '", name, "': ", tensor.datatype(),
                                                       " can only be sent in raw_input_contents"));
      }
    }
    if (found != elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' has shape [", absl::StrJoin(tensor.shape(), ", "), "], ",
                       elements > kMaxElements ? "too many" : absl::StrCat(elements),
                       " elements, but ", found, " ", tensor.datatype(), " values"));
    }
    inputs.inputs_.push_back(input);
  }
  return inputs;
}

const InferInputs::Input* InferInputs::Find(const std::string& name) const {
  for (const Input& input : inputs_) {
    if (input.tensor->name() == name) return &input;
  }
  return nullptr;
}

std::vector<int64_t> InferInputs::Shape(const std::string& name) const {
  const Input* input = Find(name);
  return {input->tensor->shape().begin(), input->tensor->shape().end()};
}

absl::StatusOr<std::vector<std::string>> InferInputs::Strings(const std::string& name) const {
  const Input& input = *Find(name);
  if (input.tensor->datatype() != "BYTES") {
    return WrongType(name, input.tensor->datatype(), "BYTES");
  }
  if (!raw_) {
    const auto& values = input.tensor->contents().bytes_contents();
    return std::vector<std::string>(values.begin(), values.end());
  }
  std::vector<std::string> values;
  values.reserve(input.elements);
  RETURN_IF_ERROR(SplitRawBytes(input.raw, name,
                                [&](std::string_view element) { values.emplace_back(element); }));
  return values;
}

absl::StatusOr<std::vector<int64_t>> InferInputs::Integers(const std::string& name) const {
  const Input& input = *Find(name);
  const std::string& type = input.tensor->datatype();
  if (type != "INT64" && type != "INT32") return WrongType(name, type, "INT64 or INT32");
  if (!raw_) {
    const inference::InferTensorContents& c = input.tensor->contents();
    if (type == "INT64")
      return std::vector<int64_t>(c.int64_contents().begin(), c.int64_contents().end());
    return std::vector<int64_t>(c.int_contents().begin(), c.int_contents().end());
  }
  std::vector<int64_t> values;
  values.reserve(input.elements);
  const size_t width = type == "INT64" ? 8 : 4;
  for (size_t at = 0; at < input.raw.size(); at += width) {
    values.push_back(width == 8 ? LittleEndian<int64_t>(input.raw.data() + at)
                                : LittleEndian<int32_t>(input.raw.data() + at));
  }
  return values;
}

absl::StatusOr<std::vector<float>> InferInputs::Floats(const std::string& name) const {
  const Input& input = *Find(name);
  if (input.tensor->datatype() != "FP32") return WrongType(name, input.tensor->datatype(), "FP32");
  if (!raw_) {
    const auto& values = input.tensor->contents().fp32_contents();
    return std::vector<float>(values.begin(), values.end());
  }
  std::vector<float> values(input.elements);
  std::memcpy(values.data(), input.raw.data(), input.raw.size());
  return values;
}

absl::StatusOr<InferOutputs> InferOutputs::Select(const inference::ModelInferRequest& request,
                                                  std::span<const std::string> available,
                                                  bool raw) {
  InferOutputs outputs;
  outputs.raw_ = raw;
  for (const auto& output : request.outputs()) {
    const std::string& name = output.name();
    if (std::find(available.begin(), available.end(), name) == available.end()) {
      return absl::InvalidArgumentError(absl::StrCat("this model has no output named '",
                                                     name.substr(0, 64), "'; it has ",
                                                     absl::StrJoin(available, ", ")));
    }
    if (outputs.Wants(name)) {
      return absl::InvalidArgumentError(absl::StrCat("output '", name, "' is asked for twice"));
    }
    if (!output.parameters().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("output '", name, "' has parameters (",
                                                     output.parameters().begin()->first,
                                                     "); no output takes any"));
    }
    outputs.wanted_.push_back(name);
  }
  if (outputs.wanted_.empty()) outputs.wanted_.assign(available.begin(), available.end());
  return outputs;
}

bool InferOutputs::Wants(const std::string& name) const {
  return std::find(wanted_.begin(), wanted_.end(), name) != wanted_.end();
}

inference::ModelInferResponse::InferOutputTensor* InferOutputs::Add(
    const std::string& name, const char* datatype, const std::vector<int64_t>& shape,
    inference::ModelInferResponse& response) const {
  if (!Wants(name)) return nullptr;
  auto* tensor = response.add_outputs();
  tensor->set_name(std::string(name));
  tensor->set_datatype(datatype);
  for (const int64_t dim : shape) tensor->add_shape(dim);
  return tensor;
}

template <typename T>
void InferOutputs::AddNumbers(
    const std::string& name, const char* datatype, const std::vector<int64_t>& shape,
    std::span<const T> values,
    google::protobuf::RepeatedField<T>* (inference::InferTensorContents::*typed)(),
    inference::ModelInferResponse& response) const {
  auto* tensor = Add(name, datatype, shape, response);
  if (tensor == nullptr) return;
  if (raw_) {
    response.add_raw_output_contents(reinterpret_cast<const char*>(values.data()),
                                     values.size_bytes());
  } else {
    (tensor->mutable_contents()->*typed)()->Add(values.begin(), values.end());
  }
}

void InferOutputs::AddIntegers(const std::string& name, std::vector<int64_t> shape,
                               std::span<const int64_t> values,
                               inference::ModelInferResponse& response) const {
  AddNumbers<int64_t>(name, "INT64", shape, values,
                      &inference::InferTensorContents::mutable_int64_contents, response);
}

void InferOutputs::AddFloats(const std::string& name, std::vector<int64_t> shape,
                             std::span<const float> values,
                             inference::ModelInferResponse& response) const {
  AddNumbers<float>(name, "FP32", shape, values,
                    &inference::InferTensorContents::mutable_fp32_contents, response);
}

void InferOutputs::AddDoubles(const std::string& name, std::vector<int64_t> shape,
                              std::span<const double> values,
                              inference::ModelInferResponse& response) const {
  AddNumbers<double>(name, "FP64", shape, values,
                     &inference::InferTensorContents::mutable_fp64_contents, response);
}

void InferOutputs::AddStrings(const std::string& name, std::vector<int64_t> shape,
                              std::span<const std::string> values,
                              inference::ModelInferResponse& response) const {
  auto* tensor = Add(name, "BYTES", shape, response);
  if (tensor == nullptr) return;
  if (!raw_) {
    for (const std::string& value : values) tensor->mutable_contents()->add_bytes_contents(value);
    return;
  }
  std::string& raw = *response.add_raw_output_contents();
  for (const std::string& value : values) {
    const uint32_t length = static_cast<uint32_t>(value.size());
    for (int i = 0; i < 4; ++i) raw.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
    raw += value;
  }
}

}  // namespace attnserve::server
