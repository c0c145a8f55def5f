// The Open Inference Protocol's tensors in and out (server/open_inference/infer_tensors.h) and
// the translation of validation errors into tensor terms
// (server/open_inference/infer_models.h, infer_requests.h, infer_answers.h). End to end, with
// Triton's own client, in tests/e2e/open_inference_test.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "server/grpc/v1/v1_messages.h"
#include "server/open_inference/infer_answers.h"
#include "server/open_inference/infer_models.h"
#include "server/open_inference/infer_requests.h"
#include "server/open_inference/infer_tensors.h"

namespace attnserve::server {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using ::testing::HasSubstr;

const std::vector<std::string> kAllowed = {"text", "input_ids", "attention_mask", "features"};

ModelInferRequest::InferInputTensor* AddInput(ModelInferRequest& request, const std::string& name,
                                              const std::string& datatype,
                                              std::vector<int64_t> shape) {
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t dim : shape) input->add_shape(dim);
  return input;
}

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::string RawStrings(const std::vector<std::string>& values) {
  std::string raw;
  for (const std::string& value : values) {
    const uint32_t length = value.size();
    raw.append(reinterpret_cast<const char*>(&length), 4);
    raw += value;
  }
  return raw;
}

std::string Error(const ModelInferRequest& request) {
  auto inputs = InferInputs::Read(request, kAllowed);
  EXPECT_FALSE(inputs.ok());
  EXPECT_EQ(inputs.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(inputs.status().message());
}

TEST(InferInputsTest, ReadsTypedContents) {
  ModelInferRequest request;
  AddInput(request, "text", "BYTES", {2})->mutable_contents()->add_bytes_contents("a");
  request.mutable_inputs(0)->mutable_contents()->add_bytes_contents("caf\xc3\xa9");
  auto* ids = AddInput(request, "input_ids", "INT32", {1, 3});
  for (int v : {7, -1, 256}) ids->mutable_contents()->add_int_contents(v);
  auto* features = AddInput(request, "features", "FP32", {1, 1, 2});
  for (float v : {0.5f, -2.0f}) features->mutable_contents()->add_fp32_contents(v);

  auto inputs = InferInputs::Read(request, kAllowed);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_FALSE(inputs->raw());
  EXPECT_EQ(*inputs->Strings("text"), (std::vector<std::string>{"a", "caf\xc3\xa9"}));
  EXPECT_EQ(*inputs->Integers("input_ids"), (std::vector<int64_t>{7, -1, 256}));
  EXPECT_EQ(*inputs->Floats("features"), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(inputs->Shape("input_ids"), (std::vector<int64_t>{1, 3}));
  EXPECT_FALSE(inputs->Has("attention_mask"));
}

TEST(InferInputsTest, ReadsRawContentsTheWayTritonsClientSendsThem) {
  ModelInferRequest request;
  AddInput(request, "text", "BYTES", {3});
  request.add_raw_input_contents(RawStrings({"ab", "", "h\xc3\xa9llo"}));
  AddInput(request, "input_ids", "INT64", {2, 2});
  request.add_raw_input_contents(RawBytes<int64_t>({1, int64_t{1} << 40, -3, 4}));
  AddInput(request, "attention_mask", "INT32", {2, 2});
  request.add_raw_input_contents(RawBytes<int32_t>({1, 1, 0, 1}));
  AddInput(request, "features", "FP32", {1, 2, 1});
  request.add_raw_input_contents(RawBytes<float>({1.5f, -0.25f}));

  auto inputs = InferInputs::Read(request, kAllowed);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_TRUE(inputs->raw());
  EXPECT_EQ(*inputs->Strings("text"), (std::vector<std::string>{"ab", "", "h\xc3\xa9llo"}));
  EXPECT_EQ(*inputs->Integers("input_ids"), (std::vector<int64_t>{1, int64_t{1} << 40, -3, 4}));
  EXPECT_EQ(*inputs->Integers("attention_mask"), (std::vector<int64_t>{1, 1, 0, 1}));
  EXPECT_EQ(*inputs->Floats("features"), (std::vector<float>{1.5f, -0.25f}));
}

TEST(InferInputsTest, RefusesTensorsThatDoNotMatchTheirShapeOrDatatype) {
  {
    ModelInferRequest request;
    AddInput(request, "input_ids", "INT64", {2, 3})->mutable_contents()->add_int64_contents(1);
    EXPECT_THAT(Error(request),
                HasSubstr("input 'input_ids' has shape [2, 3], 6 elements, but 1 INT64 values"));
  }
  {
    ModelInferRequest request;  // values in the field of another datatype
    AddInput(request, "input_ids", "INT64", {1})->mutable_contents()->add_int_contents(1);
    EXPECT_THAT(Error(request), HasSubstr("1 elements, but 0 INT64 values"));
  }
  {
    ModelInferRequest request;
    AddInput(request, "input_ids", "INT64", {1, -1});
    EXPECT_THAT(Error(request), HasSubstr("dimensions must not be negative"));
  }
  {
    ModelInferRequest request;  // a shape whose element count overflows int64
    AddInput(request, "input_ids", "INT64", {int64_t{1} << 40, int64_t{1} << 40, 1 << 20});
    EXPECT_THAT(Error(request), HasSubstr("too many elements"));
  }
  {
    ModelInferRequest request;
    AddInput(request, "input_ids", "INT65", {1});
    EXPECT_THAT(Error(request), HasSubstr("'INT65' is not an Open Inference Protocol datatype"));
  }
  {
    ModelInferRequest request;
    AddInput(request, "features", "FP16", {1});
    EXPECT_THAT(Error(request), HasSubstr("FP16 can only be sent in raw_input_contents"));
  }
  {
    ModelInferRequest request;
    AddInput(request, "logits", "FP32", {0});
    EXPECT_THAT(Error(request), HasSubstr("no input named 'logits'; it takes text, input_ids"));
  }
  {
    ModelInferRequest request;
    AddInput(request, "text", "BYTES", {0});
    AddInput(request, "text", "BYTES", {0});
    EXPECT_THAT(Error(request), HasSubstr("input 'text' is given twice"));
  }
}

TEST(InferInputsTest, RefusesMalformedRawContents) {
  {
    ModelInferRequest request;  // one raw entry for two inputs
    AddInput(request, "text", "BYTES", {0});
    AddInput(request, "input_ids", "INT64", {0});
    request.add_raw_input_contents("");
    EXPECT_THAT(Error(request), HasSubstr("raw_input_contents has 1 entries for 2 inputs"));
  }
  {
    ModelInferRequest request;
    AddInput(request, "input_ids", "INT64", {2});
    request.add_raw_input_contents(std::string(12, '\0'));
    EXPECT_THAT(Error(request), HasSubstr("12 raw bytes are not a whole number of INT64"));
  }
  {
    ModelInferRequest request;
    AddInput(request, "input_ids", "INT64", {2});
    request.add_raw_input_contents(std::string(24, '\0'));
    EXPECT_THAT(Error(request), HasSubstr("[2], 2 elements, but 3 INT64 values"));
  }
  {
    ModelInferRequest request;  // a length that runs past the end
    AddInput(request, "text", "BYTES", {1});
    request.add_raw_input_contents(RawStrings({"abc"}).substr(0, 6));
    EXPECT_THAT(Error(request), HasSubstr("element 0 says 3 bytes, but only 2 follow"));
  }
  {
    ModelInferRequest request;  // a length cut short
    AddInput(request, "text", "BYTES", {2});
    request.add_raw_input_contents(RawStrings({"abc"}) + "\x01");
    EXPECT_THAT(Error(request), HasSubstr("end inside the length of element 1"));
  }
  {
    ModelInferRequest request;  // raw and typed at once
    AddInput(request, "text", "BYTES", {1})->mutable_contents()->add_bytes_contents("a");
    request.add_raw_input_contents(RawStrings({"a"}));
    EXPECT_THAT(Error(request), HasSubstr("has contents although the request uses raw"));
  }
}

TEST(InferInputsTest, ADatatypeOtherThanTheMethodTakesIsNamed) {
  ModelInferRequest request;
  AddInput(request, "input_ids", "FP32", {1})->mutable_contents()->add_fp32_contents(1);
  auto inputs = InferInputs::Read(request, kAllowed);
  ASSERT_TRUE(inputs.ok());
  EXPECT_EQ(inputs->Integers("input_ids").status().message(),
            "input 'input_ids' has datatype FP32; it takes INT64 or INT32");
}

const std::vector<std::string> kOutputs = {"ids", "scores", "names", "total"};

void AddAll(const InferOutputs& outputs, ModelInferResponse& response) {
  const std::vector<int64_t> ids = {3, -4};
  const std::vector<float> scores = {0.5f, 0.25f};
  const std::vector<std::string> names = {"x", "\xc3\xa9t\xc3\xa9"};
  const double total = -1.5;
  outputs.AddIntegers("ids", {1, 2}, ids, response);
  outputs.AddFloats("scores", {2}, scores, response);
  outputs.AddStrings("names", {2, 1}, names, response);
  outputs.AddDoubles("total", {1}, std::span(&total, 1), response);
}

TEST(InferOutputsTest, WritesRawOutputsInTheOrderOfTheirTensors) {
  ModelInferRequest request;
  request.add_outputs()->set_name("names");
  request.add_outputs()->set_name("ids");
  auto outputs = InferOutputs::Select(request, kOutputs, /*raw=*/true);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ModelInferResponse response;
  AddAll(*outputs, response);
  ASSERT_EQ(response.outputs_size(), 2);
  ASSERT_EQ(response.raw_output_contents_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "ids");
  EXPECT_EQ(response.outputs(0).datatype(), "INT64");
  EXPECT_EQ(response.outputs(0).shape().size(), 2);
  EXPECT_FALSE(response.outputs(0).has_contents());
  EXPECT_EQ(response.raw_output_contents(0), RawBytes<int64_t>({3, -4}));
  EXPECT_EQ(response.outputs(1).name(), "names");
  EXPECT_EQ(response.outputs(1).datatype(), "BYTES");
  EXPECT_EQ(response.raw_output_contents(1), RawStrings({"x", "\xc3\xa9t\xc3\xa9"}));
}

TEST(InferOutputsTest, WritesEveryOutputTypedWhenNoneIsNamed) {
  auto outputs = InferOutputs::Select(ModelInferRequest(), kOutputs, /*raw=*/false);
  ASSERT_TRUE(outputs.ok());
  ModelInferResponse response;
  AddAll(*outputs, response);
  ASSERT_EQ(response.outputs_size(), 4);
  EXPECT_EQ(response.raw_output_contents_size(), 0);
  EXPECT_EQ(response.outputs(0).contents().int64_contents_size(), 2);
  EXPECT_EQ(response.outputs(1).contents().fp32_contents(1), 0.25f);
  EXPECT_EQ(response.outputs(2).contents().bytes_contents(1), "\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(response.outputs(3).datatype(), "FP64");
  EXPECT_EQ(response.outputs(3).contents().fp64_contents(0), -1.5);
}

TEST(InferOutputsTest, RefusesUnknownRepeatedOrParameterizedOutputs) {
  for (const auto& [names, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"logits"}, "no output named 'logits'; it has ids, scores, names, total"},
           {{"ids", "ids"}, "output 'ids' is asked for twice"}}) {
    ModelInferRequest request;
    for (const std::string& name : names) request.add_outputs()->set_name(name);
    auto outputs = InferOutputs::Select(request, kOutputs, true);
    ASSERT_FALSE(outputs.ok());
    EXPECT_THAT(std::string(outputs.status().message()), HasSubstr(message));
  }
  ModelInferRequest request;
  auto* output = request.add_outputs();
  output->set_name("ids");
  (*output->mutable_parameters())["classification"].set_int64_param(3);
  auto outputs = InferOutputs::Select(request, kOutputs, true);
  ASSERT_FALSE(outputs.ok());
  EXPECT_THAT(std::string(outputs.status().message()), HasSubstr("(classification)"));
}

TEST(InferFieldNamesTest, NameTheTensorRowOrParameter) {
  using Field = FieldPath::Field;
  using Part = FieldPath::Part;
  InferAnswer answer;
  answer.sequence_input = "text";
  answer.source_input = "source_input_ids";
  const InferFieldNames names(answer);
  const auto error = [&](const FieldPath& path, const std::string& problem) {
    return std::string(InvalidField(names, path, problem).message());
  };
  EXPECT_EQ(
      error({Field::kSequences, 3, Part::kText}, "has 2000 tokens; model m takes at most 1024"),
      "input 'text' row 3 has 2000 tokens; model m takes at most 1024");
  EXPECT_EQ(error({Field::kSequences}, "has 300 entries; at most 256"),
            "input 'text' has 300 entries; at most 256");
  EXPECT_EQ(error({Field::kSequence}, "is empty"), "input 'text' row 0 is empty");
  EXPECT_EQ(error({Field::kPrompt}, "has 9 tokens and leaves no room"),
            "input 'text' row 0 has 9 tokens and leaves no room");
  EXPECT_EQ(error({Field::kSources, 1}, "is empty"), "input 'source_input_ids' row 1 is empty");
  EXPECT_EQ(error({Field::kTopK}, "= 3 must be in [0, 2]"),
            "parameter 'top_k' = 3 must be in [0, 2]");
  EXPECT_EQ(error({Field::kText}, "has 300000 bytes; at most 262144"),
            "input 'text' row 0 has 300000 bytes; at most 262144");
  EXPECT_EQ(error({Field::kStop, 2}, "must hold 1 to 256 bytes"),
            "input 'stop' row 2 must hold 1 to 256 bytes");
  answer.sequence_input = "features";
  EXPECT_EQ(error({Field::kFeatureSets, 0, Part::kWidth}, "= 4; model sets takes 6"),
            "input 'features' row 0 width = 4; model sets takes 6");
  answer.sequence_input = "input_ids";
  EXPECT_EQ(error({Field::kIds, -1, Part::kTokenIds, 4}, "= 9 is outside the vocabulary [0, 5)"),
            "input 'input_ids' [0, 4] = 9 is outside the vocabulary [0, 5)");
  EXPECT_EQ(error({Field::kSequences, 2, Part::kTokenIds, 5}, "= 9 is outside"),
            "input 'input_ids' [2, 5] = 9 is outside");
}

// attnserve.v1 names the same fields by the message's own paths.
TEST(V1FieldNamesTest, NameTheMessageField) {
  using Field = FieldPath::Field;
  using Part = FieldPath::Part;
  const V1FieldNames names;
  EXPECT_EQ(names.Name({Field::kSequences, 2, Part::kTokenIds, 5}), "sequences[2].tokens.ids[5]");
  EXPECT_EQ(names.Name({Field::kPrompt, -1, Part::kText}), "prompt.text");
  EXPECT_EQ(names.Name({Field::kFeatureSets, 0, Part::kWidth}), "feature_sets[0].width");
  EXPECT_EQ(names.Name({Field::kIds, -1, Part::kTokenIds, 4}), "ids[4]");
  EXPECT_EQ(names.Name({Field::kHeadLayers, 1}), "head_contribution_layers[1]");
  EXPECT_EQ(names.Name({Field::kTopP}), "top_p");
}

}  // namespace
}  // namespace attnserve::server
