#include "engine/models/model.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& directory) {
  const std::string config_path = directory + "/config.json";
  std::ifstream config_file(config_path);
  if (!config_file) {
    return absl::NotFoundError(absl::StrCat(config_path, ": cannot be read"));
  }
  std::stringstream text;
  text << config_file.rdbuf();
  auto config = ParseModelConfig(text.str(), config_path);
  if (!config.ok()) return config.status();

  auto file = SafetensorsFile::Open(directory + "/model.safetensors");
  if (!file.ok()) return file.status();
  WeightReader weights(*std::move(file));

  auto model = std::make_unique<Model>();
  model->directory = directory;
  model->config = *config;
  if (config->architecture == "causal_lm") {
    auto lm = CausalLM::Load(*config, weights);
    if (!lm.ok()) return lm.status();
    model->causal_lm = *std::move(lm);
  } else {
    auto encoder = Encoder::Load(*config, weights);
    if (!encoder.ok()) return encoder.status();
    model->encoder = *std::move(encoder);
  }
  if (auto status = weights.CheckAllTaken(); !status.ok()) return status;
  if (config->token_inputs()) model->tokenizer.emplace(config->tokenizer.special_tokens);
  return model;
}

}  // namespace attnserve
