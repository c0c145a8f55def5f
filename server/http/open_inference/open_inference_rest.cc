#include "server/http/open_inference/open_inference_rest.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/http/http_unary_call.h"
#include "server/http/openai/openai_responses.h"
#include "server/open_inference/infer_answers.h"
#include "server/open_inference/infer_call.h"
#include "server/open_inference/infer_models.h"
#include "server/ops/call_scope.h"

namespace attnserve::server {
namespace {

using json = nlohmann::ordered_json;
using InputTensor = inference::ModelInferRequest::InferInputTensor;
using OutputTensor = inference::ModelInferResponse::InferOutputTensor;

constexpr char kHeaderLength[] = "inference-header-content-length";

// The protocol's error body: {"error": "..."}.
void RespondError(HttpResponder& responder, const absl::Status& status) {
  responder.Respond(
      HttpStatusOf(status), "application/json",
      json({{"error", status.message()}}).dump(-1, ' ', false, json::error_handler_t::replace));
}

void RespondJson(HttpResponder& responder, const json& body) {
  responder.Respond(200, "application/json",
                    body.dump(-1, ' ', false, json::error_handler_t::replace));
}

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// A path under /v2/models/: the model's name and version, and what is asked of it.
struct ModelPath {
  enum class Kind { kMetadata, kReady, kInfer };
  Kind kind = Kind::kMetadata;
  std::string name, version;
};

std::optional<ModelPath> ParseModelPath(const std::string& target) {
  constexpr absl::string_view kPrefix = "/v2/models/";
  if (!absl::StartsWith(target, kPrefix)) return std::nullopt;
  ModelPath path;
  std::string rest = target.substr(kPrefix.size());
  if (absl::EndsWith(rest, "/infer")) {
    path.kind = ModelPath::Kind::kInfer;
    rest.resize(rest.size() - 6);
  } else if (absl::EndsWith(rest, "/ready")) {
    path.kind = ModelPath::Kind::kReady;
    rest.resize(rest.size() - 6);
  }
  // Model names may hold slashes ("demo/score"): the version is the last "/versions/<v>".
  if (const size_t at = rest.rfind("/versions/"); at != std::string::npos) {
    path.version = rest.substr(at + 10);
    rest.resize(at);
  }
  if (rest.empty()) return std::nullopt;
  path.name = std::move(rest);
  return path;
}

// A JSON parameter as the protocol's InferParameter.
absl::StatusOr<inference::InferParameter> ReadParameter(const std::string& name,
                                                        const json& value) {
  inference::InferParameter parameter;
  if (value.is_boolean()) {
    parameter.set_bool_param(value.get<bool>());
  } else if (value.is_number_unsigned() &&
             value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    parameter.set_uint64_param(value.get<uint64_t>());
  } else if (value.is_number_integer()) {
    parameter.set_int64_param(value.get<int64_t>());  // as gRPC clients send integers
  } else if (value.is_number_float()) {
    parameter.set_double_param(value.get<double>());
  } else if (value.is_string()) {
    parameter.set_string_param(value.get<std::string>());
  } else {
    return Invalid(absl::StrCat("parameter '", name, "' must be a boolean, a number or a string"));
  }
  return parameter;
}

absl::Status ReadParameters(const json& object, const std::string& where,
                            google::protobuf::Map<std::string, inference::InferParameter>& into) {
  if (!object.is_object()) return Invalid(where + ": parameters must be an object");
  for (const auto& [name, value] : object.items()) {
    ASSIGN_OR_RETURN(into[name], ReadParameter(name, value));
  }
  return absl::OkStatus();
}

// A tensor's "data", nested or flat, appended row-major.
absl::Status Flatten(const json& data, std::vector<const json*>& into, int depth = 0) {
  if (!data.is_array()) {
    into.push_back(&data);
    return absl::OkStatus();
  }
  if (depth > 32) return Invalid("data nests deeper than 32 levels");
  for (const json& element : data) RETURN_IF_ERROR(Flatten(element, into, depth + 1));
  return absl::OkStatus();
}

// Appends `value` as a little-endian `T`.
template <typename T>
void AppendRaw(std::string& raw, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little-endian
  raw.append(bytes, sizeof(T));
}

// One input's JSON data into the typed contents of its datatype, or (`raw` not null) into raw
// little-endian bytes, as the binary extension carries them.
absl::Status ReadData(const json& data, InputTensor& tensor, std::string* raw) {
  const std::string where = absl::StrCat("input '", tensor.name(), "'");
  std::vector<const json*> elements;
  RETURN_IF_ERROR(Flatten(data, elements));
  const std::string& type = tensor.datatype();
  inference::InferTensorContents& contents = *tensor.mutable_contents();
  for (size_t i = 0; i < elements.size(); ++i) {
    const json& e = *elements[i];
    const auto wrong = [&](const char* expected) {
      return Invalid(absl::StrCat(where, " element ", i, ": ", type, " data must be ", expected));
    };
    if (type == "BYTES") {
      if (!e.is_string()) return wrong("strings");
      const std::string& text = e.get_ref<const std::string&>();
      if (raw != nullptr) {
        AppendRaw<uint32_t>(*raw, static_cast<uint32_t>(text.size()));
        raw->append(text);
      } else {
        contents.add_bytes_contents(text);
      }
    } else if (type == "BOOL") {
      if (!e.is_boolean()) return wrong("true or false");
      raw != nullptr ? AppendRaw<uint8_t>(*raw, e.get<bool>()) : contents.add_bool_contents(e);
    } else if (type == "FP32" || type == "FP64") {
      if (!e.is_number()) return wrong("numbers");
      const double value = e.get<double>();
      if (type == "FP32") {
        raw != nullptr ? AppendRaw<float>(*raw, static_cast<float>(value))
                       : contents.add_fp32_contents(static_cast<float>(value));
      } else {
        raw != nullptr ? AppendRaw<double>(*raw, value) : contents.add_fp64_contents(value);
      }
    } else if (absl::StartsWith(type, "INT") || absl::StartsWith(type, "UINT")) {
      if (!e.is_number_integer()) return wrong("integers");
      const bool is_unsigned = type[0] == 'U';
      if (is_unsigned && !e.is_number_unsigned()) return wrong("non-negative integers");
      const int64_t value = e.get<int64_t>();
      const int bits = std::stoi(type.substr(is_unsigned ? 4 : 3));
      if (bits < 64) {
        const int64_t low = is_unsigned ? 0 : -(int64_t{1} << (bits - 1));
        const int64_t high =
            is_unsigned ? (int64_t{1} << bits) - 1 : (int64_t{1} << (bits - 1)) - 1;
        if (value < low || value > high) {
          return Invalid(absl::StrCat(where, " element ", i, ": ", value, " is not a ", type));
        }
      }
      if (raw != nullptr) {
        raw->append(reinterpret_cast<const char*>(&value), static_cast<size_t>(bits / 8));
      } else if (type == "INT64") {
        contents.add_int64_contents(value);
      } else if (type == "UINT64") {
        contents.add_uint64_contents(e.get<uint64_t>());
      } else if (is_unsigned) {
        contents.add_uint_contents(static_cast<uint32_t>(value));
      } else {
        contents.add_int_contents(static_cast<int32_t>(value));
      }
    } else {
      return Invalid(absl::StrCat(where, ": ", type.substr(0, 16),
                                  " cannot be sent as JSON data (send it as binary data)"));
    }
  }
  return absl::OkStatus();
}

// What the answer's outputs are asked to be: binary (the extension) or JSON data, by name;
// `all_binary` from the request's binary_data_output parameter.
struct OutputEncoding {
  bool all_binary = false;
  std::map<std::string, bool> binary;

  bool Binary(const std::string& name) const {
    const auto it = binary.find(name);
    return it != binary.end() ? it->second : all_binary;
  }
};

// The request body (JSON, then the binary inputs when the extension is used) as the protocol's
// ModelInferRequest.
absl::Status ReadInferRequest(const HttpRequest& http, inference::ModelInferRequest& request,
                              OutputEncoding& encoding) {
  size_t json_length = http.body.size();
  if (const std::string header = http.Header(kHeaderLength); !header.empty()) {
    if (!absl::SimpleAtoi(header, &json_length) || json_length > http.body.size()) {
      return Invalid(absl::StrCat("Inference-Header-Content-Length is ", header.substr(0, 24),
                                  "; the body has ", http.body.size(), " bytes"));
    }
  }
  const json body =
      json::parse(http.body.substr(0, json_length), nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return Invalid("the request is not a JSON object");
  if (auto id = body.find("id"); id != body.end()) {
    if (!id->is_string()) return Invalid("id must be a string");
    request.set_id(id->get<std::string>());
  }
  if (auto parameters = body.find("parameters"); parameters != body.end()) {
    RETURN_IF_ERROR(ReadParameters(*parameters, "the request", *request.mutable_parameters()));
    auto& map = *request.mutable_parameters();
    if (auto binary = map.find("binary_data_output"); binary != map.end()) {
      encoding.all_binary = binary->second.bool_param();
      map.erase(binary);
    }
  }
  const auto inputs = body.find("inputs");
  if (inputs == body.end() || !inputs->is_array()) return Invalid("inputs must be a list");
  // With any binary input, every input goes raw, as the protocol has raw contents for all or none.
  bool binary = false;
  for (const json& input : *inputs) {
    if (!input.is_object()) return Invalid("each input must be an object");
    if (auto p = input.find("parameters"); p != input.end() && p->contains("binary_data_size")) {
      binary = true;
    }
  }
  size_t offset = json_length;
  for (const json& input : *inputs) {
    InputTensor& tensor = *request.add_inputs();
    const auto name = input.find("name");
    if (name == input.end() || !name->is_string()) return Invalid("each input needs a name");
    tensor.set_name(name->get<std::string>());
    const std::string where = absl::StrCat("input '", tensor.name(), "'");
    const auto datatype = input.find("datatype");
    if (datatype == input.end() || !datatype->is_string())
      return Invalid(where + " needs a datatype");
    tensor.set_datatype(datatype->get<std::string>());
    const auto shape = input.find("shape");
    if (shape == input.end() || !shape->is_array()) return Invalid(where + " needs a shape");
    for (const json& d : *shape) {
      if (!d.is_number_integer()) return Invalid(where + ": shape must hold integers");
      tensor.add_shape(d.get<int64_t>());
    }
    std::optional<int64_t> binary_size;
    if (auto p = input.find("parameters"); p != input.end()) {
      RETURN_IF_ERROR(ReadParameters(*p, where, *tensor.mutable_parameters()));
      auto& map = *tensor.mutable_parameters();
      if (auto size = map.find("binary_data_size"); size != map.end()) {
        binary_size = size->second.has_int64_param()
                          ? size->second.int64_param()
                          : static_cast<int64_t>(size->second.uint64_param());
        map.erase(size);
      }
    }
    if (binary_size) {
      if (*binary_size < 0 || static_cast<size_t>(*binary_size) > http.body.size() - offset) {
        return Invalid(absl::StrCat(where, ": binary_data_size ", *binary_size, " runs past the ",
                                    http.body.size() - offset, " bytes of binary data left"));
      }
      request.add_raw_input_contents(http.body.substr(offset, *binary_size));
      offset += *binary_size;
      continue;
    }
    const auto data = input.find("data");
    if (data == input.end()) return Invalid(where + " has neither data nor binary_data_size");
    RETURN_IF_ERROR(ReadData(*data, tensor, binary ? request.add_raw_input_contents() : nullptr));
  }
  if (offset != http.body.size()) {
    return Invalid(absl::StrCat("the body has ", http.body.size() - offset,
                                " bytes of binary data that no input's binary_data_size claims"));
  }
  if (auto outputs = body.find("outputs"); outputs != body.end()) {
    if (!outputs->is_array()) return Invalid("outputs must be a list");
    for (const json& output : *outputs) {
      const auto name = output.is_object() ? output.find("name") : output.end();
      if (name == output.end() || !name->is_string()) return Invalid("each output needs a name");
      auto& requested = *request.add_outputs();
      requested.set_name(name->get<std::string>());
      if (auto p = output.find("parameters"); p != output.end()) {
        RETURN_IF_ERROR(ReadParameters(*p, "output '" + requested.name() + "'",
                                       *requested.mutable_parameters()));
        auto& map = *requested.mutable_parameters();
        if (auto b = map.find("binary_data"); b != map.end()) {
          encoding.binary[requested.name()] = b->second.bool_param();
          map.erase(b);
        }
      }
    }
  }
  return absl::OkStatus();
}

// One output's values, from its typed contents or its raw bytes: as JSON data, or as raw bytes.
template <typename T>
void NumbersOut(const OutputTensor& tensor, const std::string* raw, size_t count,
                const google::protobuf::RepeatedField<T>& typed, json* data, std::string* bytes) {
  for (size_t i = 0; i < count; ++i) {
    T value;
    if (raw != nullptr) {
      std::memcpy(&value, raw->data() + i * sizeof(T), sizeof(T));
    } else {
      value = typed.Get(static_cast<int>(i));
    }
    if (data != nullptr) data->push_back(value);
    if (bytes != nullptr) AppendRaw<T>(*bytes, value);
  }
  (void)tensor;
}

// The response as JSON, with the binary outputs' bytes after it when any is asked so.
std::pair<std::string, std::string> WriteInferResponse(
    const inference::ModelInferResponse& response, const OutputEncoding& encoding) {
  json body = {{"model_name", response.model_name()}, {"model_version", response.model_version()}};
  if (!response.id().empty()) body["id"] = response.id();
  json outputs = json::array();
  std::string binary;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const OutputTensor& tensor = response.outputs(i);
    json output = {{"name", tensor.name()}, {"datatype", tensor.datatype()}};
    int64_t count = 1;
    for (int64_t d : tensor.shape()) count *= d;
    output["shape"] = json(std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end()));
    const std::string* raw =
        i < response.raw_output_contents_size() ? &response.raw_output_contents(i) : nullptr;
    const bool as_binary = encoding.Binary(tensor.name());
    json data = json::array();
    std::string bytes;
    json* into = as_binary ? nullptr : &data;
    std::string* out = as_binary ? &bytes : nullptr;
    const auto& c = tensor.contents();
    const auto n = static_cast<size_t>(count);
    if (tensor.datatype() == "INT64") {
      NumbersOut<int64_t>(tensor, raw, n, c.int64_contents(), into, out);
    } else if (tensor.datatype() == "FP32") {
      NumbersOut<float>(tensor, raw, n, c.fp32_contents(), into, out);
    } else if (tensor.datatype() == "FP64") {
      NumbersOut<double>(tensor, raw, n, c.fp64_contents(), into, out);
    } else {  // BYTES
      size_t at = 0;
      for (size_t e = 0; e < n; ++e) {
        std::string text;
        if (raw != nullptr) {
          uint32_t length = 0;
          std::memcpy(&length, raw->data() + at, 4);
          text = raw->substr(at + 4, length);
          at += 4 + length;
        } else {
          text = c.bytes_contents(static_cast<int>(e));
        }
        if (as_binary) {
          AppendRaw<uint32_t>(bytes, static_cast<uint32_t>(text.size()));
          bytes += text;
        } else {
          data.push_back(std::move(text));
        }
      }
    }
    if (as_binary) {
      output["parameters"] = {{"binary_data_size", bytes.size()}};
      binary += bytes;
    } else {
      output["data"] = std::move(data);
    }
    outputs.push_back(std::move(output));
  }
  body["outputs"] = std::move(outputs);
  return {body.dump(-1, ' ', false, json::error_handler_t::replace), std::move(binary)};
}

// JSON, or with binary outputs the JSON's length in a header and their bytes after it.
HttpBody InferBody(const inference::ModelInferResponse& response, const OutputEncoding& encoding) {
  auto [body, binary] = WriteInferResponse(response, encoding);
  if (binary.empty()) return body;
  HttpHeaders headers = {{"Inference-Header-Content-Length", std::to_string(body.size())}};
  return HttpBody(body + binary, "application/octet-stream", std::move(headers));
}

}  // namespace

HttpApi::Match OpenInferenceRest::Matches(const HttpRequest& request) const {
  const std::string& path = request.target;
  if (path != "/v2" && !absl::StartsWith(path, "/v2/health/") &&
      !absl::StartsWith(path, "/v2/models/")) {
    return Match::kNo;
  }
  const auto model = ParseModelPath(path);
  const bool post = model && model->kind == ModelPath::Kind::kInfer;
  return request.method == (post ? "POST" : "GET") ? Match::kYes : Match::kWrongMethod;
}

bool OpenInferenceRest::IsProbe(const HttpRequest& request) const {
  return request.method == "GET" &&
         (request.target == "/v2/health/live" || request.target == "/v2/health/ready");
}

void OpenInferenceRest::Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  const std::string& path = request.target;
  if (path == "/v2/health/live") return responder->Respond(200, "application/json", "{}");
  if (path == "/v2/health/ready") {
    return admission_.accepting() ? responder->Respond(200, "application/json", "{}")
                                  : RespondError(*responder, ShuttingDownError());
  }
  if (path == "/v2") {
    return RespondJson(*responder, {{"name", "attnserve"},
                                    {"version", ATTNSERVE_VERSION},
                                    {"extensions", {"binary_tensor_data"}}});
  }
  const auto model = ParseModelPath(path);
  if (!model) {
    return RespondError(*responder,
                        absl::NotFoundError(absl::StrCat("no such path: ", path.substr(0, 128))));
  }
  switch (model->kind) {
    case ModelPath::Kind::kMetadata:
      return ModelMetadata(model->name, model->version, *responder);
    case ModelPath::Kind::kReady: {
      // 200 when ready; 400 for a model that is not served, as Triton answers.
      const bool ready = admission_.accepting() &&
                         FindInferModel(admission_.repository(), model->name).ok() &&
                         CheckModelVersion(model->name, model->version).ok();
      return ready ? responder->Respond(200, "application/json", "{}")
                   : RespondError(*responder,
                                  absl::InvalidArgumentError(absl::StrCat(
                                      "model ", model->name.substr(0, 128), " is not ready")));
    }
    case ModelPath::Kind::kInfer:
      return Infer(request, model->name, model->version, std::move(responder));
  }
}

void OpenInferenceRest::ModelMetadata(const std::string& name, const std::string& version,
                                      HttpResponder& responder) const {
  auto answer = [&]() -> absl::StatusOr<json> {
    ASSIGN_OR_RETURN(auto model, FindInferModel(admission_.repository(), name));
    RETURN_IF_ERROR(CheckModelVersion(name, version));
    inference::ModelMetadataResponse metadata;
    DescribeInferModel(model, metadata);
    const auto tensors = [](const auto& list) {
      json out = json::array();
      for (const auto& t : list) {
        out.push_back({{"name", t.name()},
                       {"datatype", t.datatype()},
                       {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}});
      }
      return out;
    };
    return json{{"name", name},
                {"versions",
                 std::vector<std::string>(metadata.versions().begin(), metadata.versions().end())},
                {"platform", metadata.platform()},
                {"inputs", tensors(metadata.inputs())},
                {"outputs", tensors(metadata.outputs())}};
  }();
  if (!answer.ok()) return RespondError(responder, answer.status());
  RespondJson(responder, *answer);
}

void OpenInferenceRest::Infer(const HttpRequest& http, const std::string& name,
                              const std::string& version,
                              std::shared_ptr<HttpResponder> responder) const {
  inference::ModelInferRequest request;
  request.set_model_name(name);
  request.set_model_version(version);
  auto encoding = std::make_shared<OutputEncoding>();
  InferStart start =
      PrepareModelInfer(admission_, ReadInferRequest(http, request, *encoding), request);
  auto* call = new HttpUnaryCall(
      responder, CallScope(admission_.metrics(), start.label, "ModelInfer"), admission_.answers(),
      [answer = start.answer, encoding](Task& task) {
        return InferBody(InferResponse(*answer, task), *encoding);
      },
      RespondError);
  // JSON data spells out what protobuf packs: as the other JSON APIs, four times its bound.
  StartModelInfer(admission_, HttpOrigin(http), start, call, /*answer_scale=*/4,
                  [responder, encoding](absl::StatusOr<inference::ModelInferResponse> answer) {
                    if (!answer.ok()) return RespondError(*responder, answer.status());
                    HttpBody body = InferBody(*answer, *encoding);
                    responder->Respond(200, std::move(body.content_type), std::move(body.bytes),
                                       std::move(body.headers));
                  });
}

}  // namespace attnserve::server
