// Every way a model directory can be malformed is refused at load time with a message that
// names the file and the field or tensor. Starts from a valid directory written by the exporter
// (a golden case) and breaks one thing at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/match.h"
#include "engine/architectures/model.h"

namespace attnserve {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const char kSource[] = ATTNSERVE_GOLDEN_DIR "/model_causal_lm_softmax_layer_norm_pre_sinusoidal";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class ModelLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(kSource, dir_, fs::copy_options::recursive);
  }

  fs::path config_path() const { return dir_ / "config.json"; }
  fs::path weights_path() const { return dir_ / "model.safetensors"; }

  void EditConfig(const std::function<void(Json&)>& edit) {
    Json config = Json::parse(ReadFile(config_path()));
    edit(config);
    WriteFile(config_path(), config.dump());
  }

  // Rewrites model.safetensors with an edited header and the same data section.
  void EditHeader(const std::function<void(Json&)>& edit) {
    const std::string bytes = ReadFile(weights_path());
    uint64_t length = 0;
    std::memcpy(&length, bytes.data(), 8);
    Json header = Json::parse(bytes.substr(8, length));
    edit(header);
    const std::string text = header.dump();
    const uint64_t new_length = text.size();
    std::string out(reinterpret_cast<const char*>(&new_length), 8);
    WriteFile(weights_path(), out + text + bytes.substr(8 + length));
  }

  void ExpectRefused(absl::StatusCode code, const std::string& file,
                     const std::vector<std::string>& fragments) {
    auto model = LoadModel(dir_.string());
    ASSERT_FALSE(model.ok()) << "a malformed directory was accepted";
    EXPECT_EQ(model.status().code(), code) << model.status();
    EXPECT_TRUE(absl::StrContains(model.status().message(), (dir_ / file).string()))
        << model.status();
    for (const std::string& fragment : fragments) {
      EXPECT_TRUE(absl::StrContains(model.status().message(), fragment)) << model.status();
    }
  }

  void ExpectInvalid(const std::string& file, const std::vector<std::string>& fragments) {
    ExpectRefused(absl::StatusCode::kInvalidArgument, file, fragments);
  }

  fs::path dir_;
};

TEST_F(ModelLoaderTest, LoadsTheUntouchedDirectory) {
  auto model = LoadModel(dir_.string());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE((*model)->As<CausalLM>(), nullptr);
  EXPECT_NE((*model)->tokenizer, nullptr);
}

TEST_F(ModelLoaderTest, MissingFiles) {
  fs::remove(config_path());
  ExpectRefused(absl::StatusCode::kNotFound, "config.json", {"cannot be read"});
  SetUp();
  fs::remove(weights_path());
  ExpectRefused(absl::StatusCode::kNotFound, "model.safetensors", {});
}

TEST_F(ModelLoaderTest, ConfigThatIsNotJson) {
  WriteFile(config_path(), "{\"model_dim\": 32,");
  ExpectInvalid("config.json", {"not a JSON object"});
}

TEST_F(ModelLoaderTest, UnknownField) {
  EditConfig([](Json& c) { c["num_layer"] = 2; });
  ExpectInvalid("config.json", {"field num_layer is not a known setting"});
}

TEST_F(ModelLoaderTest, OutOfRangeAndMistypedValues) {
  EditConfig([](Json& c) { c["num_heads"] = 0; });
  ExpectInvalid("config.json", {"field num_heads is 0, outside [1, 1024]"});
  SetUp();
  EditConfig([](Json& c) { c["model_dim"] = "32"; });
  ExpectInvalid("config.json", {"field model_dim must be an integer"});
  SetUp();
  EditConfig([](Json& c) { c["norm_eps"] = -1.0; });
  ExpectInvalid("config.json", {"field norm_eps"});
}

TEST_F(ModelLoaderTest, UnknownChoiceAndVersion) {
  EditConfig([](Json& c) { c["attention"] = "sparse"; });
  ExpectInvalid("config.json", {"field attention is \"sparse\", expected one of"});
  SetUp();
  EditConfig([](Json& c) { c["architecture"] = "rnn"; });
  ExpectInvalid("config.json", {"field architecture"});
  SetUp();
  EditConfig([](Json& c) { c["format_version"] = 2; });
  ExpectInvalid("config.json", {"format_version is 2"});
  SetUp();
  EditConfig([](Json& c) { c.erase("model_dim"); });
  ExpectInvalid("config.json", {"field model_dim is missing"});
}

TEST_F(ModelLoaderTest, ContradictoryConfig) {
  EditConfig([](Json& c) { c["input_dim"] = 8; });
  ExpectInvalid("config.json", {"exactly one of vocab_size"});
  SetUp();
  EditConfig([](Json& c) {
    c["attention"] = "linear";
    c["positions"] = "alibi";
  });
  ExpectInvalid("config.json", {"alibi"});
  SetUp();
  EditConfig([](Json& c) { c["tokenizer"]["special_tokens"]["<x>"] = 7; });
  ExpectInvalid("config.json", {"special_tokens.<x>"});
}

TEST_F(ModelLoaderTest, RotaryGroupedQueryAndWindowSettingsAreChecked) {
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& c) {
         c["positions"] = "rope";
         c["attention"] = "linear";
       },
       "rotary positions need softmax or exclusive attention"},
      {[](Json& c) {
         c["positions"] = "rope";
         c["rope_dims"] = 7;
       },
       "rope_dims is 7, must be even"},
      {[](Json& c) {
         c["positions"] = "rope";
         c["rope_scaling"] = Json{{"type", "yarn"}, {"factor", 2.0}};
       },
       "rope_scaling: field type is \"yarn\""},
      {[](Json& c) {
         c["positions"] = "rope";
         c["rope_scaling"] = Json{{"type", "llama3"}, {"factor", 8.0}};
       },
       "field original_max_positions is missing"},
      {[](Json& c) { c["rope_theta"] = 500.0; }, "field rope_theta is not a known setting"},
      {[](Json& c) { c["num_kv_heads"] = 2; }, "num_kv_heads is 2, must divide num_heads (3)"},
      {[](Json& c) {
         c["attention_window"] = 4;
         c["attention"] = "linear";
       },
       "a sliding window needs causal softmax or exclusive attention"},
  };
  for (const auto& [change, message] : cases) {
    SetUp();
    EditConfig(change);
    ExpectInvalid("config.json", {message});
  }
}

TEST_F(ModelLoaderTest, ClassifierSettingsAreChecked) {
  const auto encoder_with = [](Json classifier) {
    return [classifier](Json& c) {
      c["architecture"] = "encoder";
      c.erase("tie_embeddings");
      c["classifier"] = classifier;
    };
  };
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& c) {
         c["classifier"] = Json{{"num_labels", 2}};
       },
       "field classifier is not a known setting"},
      {encoder_with(Json::object()), "classifier: field num_labels is missing"},
      {encoder_with({{"num_labels", 2}, {"labels", {"yes"}}}),
       "classifier: field labels has 1 names for 2 labels"},
      {encoder_with({{"num_labels", 2}, {"labels", "yes"}}),
       "classifier: field labels must be a list of strings"},
      {encoder_with({{"num_labels", 1}, {"pooling", "pma"}}),
       "classifier: field pooling is \"pma\", expected one of first, last, mean"},
      {encoder_with({{"num_labels", 1}, {"score_activation", "tanh"}}),
       "classifier: field score_activation is \"tanh\""},
      {encoder_with({{"num_labels", 1}, {"bias", true}}),
       "classifier: field bias is not a known setting"},
  };
  for (const auto& [change, message] : cases) {
    SetUp();
    EditConfig(change);
    ExpectInvalid("config.json", {message});
  }
}

TEST_F(ModelLoaderTest, TokenizerWithIdsBeyondTheModelsRows) {
  // A tokenizer.json may give any id below 2^31 (as the reference does); one beyond the model's
  // vocab_size is refused, and loading the file costs no table as long as its largest id.
  const Json vocab = {{"[UNK]", 0}, {"a", 1}, {"b", 2147483647}};
  WriteFile(dir_ / "tokenizer.json", Json{{"version", "1.0"},
                                          {"model",
                                           {{"type", "WordPiece"},
                                            {"unk_token", "[UNK]"},
                                            {"continuing_subword_prefix", "##"},
                                            {"max_input_chars_per_word", 100},
                                            {"vocab", vocab}}}}
                                         .dump());
  EditConfig([](Json& c) { c["tokenizer"] = Json{{"type", "huggingface"}}; });
  ExpectInvalid("tokenizer.json",
                {"the tokenizer has ids up to 2147483647, but the model's vocab_size is"});
}

TEST_F(ModelLoaderTest, ShapeThatDisagreesWithTheConfig) {
  EditConfig([](Json& c) { c["ffn_dim"] = 64; });
  ExpectInvalid(
      "model.safetensors",
      {"tensor 'layers.0.ffn.fc1.weight' has shape [48, 32], the config implies [64, 32]"});
  SetUp();
  EditConfig([](Json& c) { c["num_layers"] = 3; });
  ExpectInvalid("model.safetensors", {"missing tensor 'layers.2."});
}

TEST_F(ModelLoaderTest, MissingAndUnexpectedTensors) {
  EditHeader([](Json& h) { h.erase("layers.1.ffn.fc2.weight"); });
  ExpectInvalid("model.safetensors", {"missing tensor 'layers.1.ffn.fc2.weight'"});
  SetUp();
  EditConfig([](Json& c) { c["num_layers"] = 1; });
  ExpectInvalid("model.safetensors", {"unexpected tensor 'layers.1."});
}

TEST_F(ModelLoaderTest, WrongDtype) {
  EditHeader([](Json& h) {
    Json& entry = h["final_norm.weight"];
    entry["dtype"] = "I32";
  });
  ExpectInvalid("model.safetensors", {"'final_norm.weight' is I32, expected F32, F16 or BF16"});
}

TEST_F(ModelLoaderTest, BrokenSafetensors) {
  const std::string bytes = ReadFile(weights_path());
  WriteFile(weights_path(), bytes.substr(0, bytes.size() - 100));
  ExpectInvalid("model.safetensors", {"fall outside"});
  SetUp();
  WriteFile(weights_path(), bytes.substr(0, 5));
  ExpectInvalid("model.safetensors", {"truncated"});
  SetUp();
  EditHeader([](Json& h) {
    h["final_norm.weight"]["data_offsets"] = h["final_norm.bias"]["data_offsets"];
  });
  ExpectInvalid("model.safetensors", {"overlap"});
  SetUp();
  std::string huge = bytes;
  const uint64_t length = uint64_t{1} << 36;
  std::memcpy(huge.data(), &length, 8);
  WriteFile(weights_path(), huge);
  ExpectInvalid("model.safetensors", {"exceeds"});
}

TEST_F(ModelLoaderTest, NonFiniteWeights) {
  // One value of layers.1.ffn.fc2.weight made NaN, then infinity: refused, naming the tensor.
  const std::string bytes = ReadFile(weights_path());
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  const Json header = Json::parse(bytes.substr(8, length));
  const uint64_t begin = header["layers.1.ffn.fc2.weight"]["data_offsets"][0];
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    std::string edited = bytes;
    std::memcpy(edited.data() + 8 + length + begin + 4 * 37, &bad, 4);
    WriteFile(weights_path(), edited);
    ExpectInvalid("model.safetensors", {"tensor 'layers.1.ffn.fc2.weight' holds",
                                        std::isnan(bad) ? "NaN" : "infinity", "at element 37"});
  }
}

}  // namespace
}  // namespace attnserve
