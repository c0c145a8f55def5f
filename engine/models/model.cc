#include "engine/models/model.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/packed_weight.h"

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
  auto model = std::make_unique<Model>();
  model->weight_file = file->bytes();
  WeightReader weights(*std::move(file));

  model->directory = directory;
  model->config = *config;
  auto load = [&](auto& slot, auto loader) -> absl::Status {
    auto loaded = loader(*config, weights);
    if (!loaded.ok()) return loaded.status();
    slot = *std::move(loaded);
    return absl::OkStatus();
  };
  const std::string& architecture = config->architecture;
  absl::Status status;
  if (architecture == "causal_lm") {
    status = load(model->causal_lm, CausalLM::Load);
  } else if (architecture == "encoder") {
    status = load(model->encoder, Encoder::Load);
  } else if (architecture == "next_word") {
    status = load(model->next_word, NextWordModel::Load);
  } else if (architecture == "seq2seq") {
    status = load(model->seq2seq, Seq2Seq::Load);
  } else if (architecture == "perceiver_io") {
    status = load(model->perceiver_io, PerceiverIO::Load);
  } else {
    status = load(model->set_transformer, SetTransformer::Load);
  }
  if (!status.ok()) return status;
  if (auto status = weights.CheckAllTaken(); !status.ok()) return status;
  if (config->token_inputs()) model->tokenizer.emplace(config->tokenizer.special_tokens);
  // Every layer has a [model_dim, model_dim]-sized projection or larger (out_proj).
  model->weights_packed = PackedWeight::WorthPacking(config->model_dim, config->model_dim);
  return model;
}

}  // namespace attnserve
