#include "server/frontend/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/kernels/few_rows_linear.h"
#include "engine/matmul.h"
#include "text/tool_calls/tool_call_format.h"

namespace attnserve::server {

std::unique_ptr<ModelRepository> ModelRepository::Load(const std::string& root,
                                                       const EngineLoopOptions& options,
                                                       const MemoryLimit& limit,
                                                       ServerMetrics& metrics) {
  auto repository = std::make_unique<ModelRepository>();
  std::error_code error;
  std::vector<std::filesystem::path> directories;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    // A model directory, or a GGUF file served under its name without .gguf.
    if (entry.is_directory() || entry.path().extension() == ".gguf") {
      directories.push_back(entry.path());
    }
  }
  if (error) {
    repository->failures_[root] = "cannot list the model repository: " + error.message();
  }
  std::sort(directories.begin(), directories.end());
  const auto fail = [&](const std::string& name, const absl::Status& status) {
    std::cerr << "attnserve: model " << name << " not loaded: " << status.message() << "\n";
    repository->failures_[name] = std::string(status.message());
  };
  struct Loaded {
    std::string name;
    std::unique_ptr<Model> model;
    EngineLoopOptions options;
  };
  std::vector<Loaded> loaded;
  for (const auto& directory : directories) {
    const std::string name = directory.extension() == ".gguf" ? directory.stem().string()
                                                              : directory.filename().string();
    auto model_options = ServingOptionsFor(directory.string(), options);
    if (!model_options.ok()) {
      fail(name, model_options.status());
      continue;
    }
    auto model = LoadModel(directory.string(), {model_options->weights});
    if (model.ok() && !model_options->chat_template_file.empty()) {
      // serving.json's chat template replaces the model's default one.
      const std::string path = directory.string() + "/" + model_options->chat_template_file;
      std::ifstream file(path);
      std::stringstream text;
      text << file.rdbuf();
      absl::StatusOr<ChatTemplate> parsed =
          file ? ChatTemplate::Parse(text.str(), path)
               : absl::InvalidArgumentError(absl::StrCat(path,
                                                         ": cannot be read (serving.json's "
                                                         "chat_template)"));
      if (parsed.ok()) {
        (*model)->chat_templates.by_name.insert_or_assign("default", *std::move(parsed));
      } else {
        model = parsed.status();
      }
    }
    if (!model.ok()) {
      fail(name, model.status());
      continue;
    }
    const WeightFormat& weights = (*model)->config.weights;
    std::cerr << "attnserve: model " << name << ": " << (*model)->source << ", ";
    if (weights.quantized && weights.bits == 4) {
      std::cerr << "int4 weights (int8 where a layer's depth is not a multiple of 32"
                << (weights.int4_lm_head ? "" : ", and the token table and LM head")
                << "), int8 activations for up to "
                << (BestKernelIsa() == KernelIsa::kAvx512Vnni ? kFewRowsMaxInt8Activations
                                                              : kFewRowsMaxInt8)
                << " rows, prefill through " << Int8TileFormatName(BestInt8TileFormat())
                << " tiles";
    } else if (weights.quantized) {
      std::cerr << "int8 weights, a scale per " << weights.group_size
                << " input columns (0: per output), "
                << (weights.int8_activations && BestKernelIsa() == KernelIsa::kAvx512Vnni ? "int8"
                                                                                          : "float")
                << " activations for up to " << kFewRowsMaxInt8Activations
                << " rows, prefill through " << Int8TileFormatName(BestInt8TileFormat())
                << " tiles";
    } else if (weights.bf16) {
      std::cerr << (Bf16WeightsTakeAmx()
                        ? "bf16 weights, multiplied through AMX (inputs rounded to bf16)"
                        : "bf16 weights, multiplied in float32 (this CPU has no AMX, or "
                          "ATTNSERVE_BF16=0)");
    } else {
      std::cerr << "float32 weights";
    }
    std::cerr << (weights.automatic ? " (--weights=auto)" : "");
    if (!(*model)->weights_as_stored.empty()) std::cerr << "; " << (*model)->weights_as_stored;
    std::cerr << "\n";
    loaded.push_back({name, *std::move(model), *model_options});
  }
  // Shared out once every model's weights are resident (or mapped): what is left is theirs.
  const MemoryPlan& plan = repository->plan_ =
      PlanMemory(limit, ResidentBytes(), static_cast<int>(std::max<size_t>(loaded.size(), 1)));
  std::cerr << "attnserve: memory limit " << (plan.limit.bytes >> 20) << " MiB ("
            << plan.limit.source << "), " << (plan.resident >> 20) << " MiB resident, "
            << (plan.reserve >> 20) << " MiB reserved, " << (plan.per_model >> 20)
            << " MiB per model\n";
  for (Loaded& entry : loaded) {
    const bool caches_keys = entry.model->servable->Answers(ModelMethod::kGenerate);
    entry.options.budget = SplitModelBudget(plan.per_model, caches_keys);
    const std::string architecture = entry.model->config.architecture;
    auto worker = EngineLoop::Create(entry.name, std::move(entry.model), entry.options, metrics);
    if (!worker.ok()) {
      fail(entry.name, worker.status());
      continue;
    }
    std::cerr << "attnserve: model " << entry.name << " loaded (" << architecture << "; "
              << (*worker)->options().max_batch_tokens << " tokens per engine call, KV cache for "
              << (*worker)->kv_cache_tokens() << " tokens"
              << ((*worker)->kv_cache_tokens() == 0
                      ? ""
                      : absl::StrCat(", ", KvCacheTypeName((*worker)->kv_block_shape().type)))
              << ")\n";
    repository->workers_[entry.name] = *std::move(worker);
  }
  return repository;
}

absl::StatusOr<EngineLoopOptions> ServingOptionsFor(const std::string& directory,
                                                    const EngineLoopOptions& defaults) {
  const std::string path = directory + "/serving.json";
  std::ifstream file(path);
  if (!file) return defaults;
  std::stringstream text;
  text << file.rdbuf();
  const nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  EngineLoopOptions options = defaults;
  for (const auto& item : json.items()) {
    const std::string& key = item.key();
    const auto& value = item.value();
    if (key == "int8_activations" || key == "int4_lm_head") {
      if (!value.is_boolean()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": field ", key, " must be true or false"));
      }
      (key == "int8_activations" ? options.weights.int8_activations
                                 : options.weights.int4_lm_head) = value.get<bool>();
      continue;
    }
    if (key == "kv_cache") {
      const absl::Status type =
          ParseKvCacheType(value.is_string() ? value.get<std::string>() : "", options.kv_cache);
      if (!type.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": field kv_cache: ", type.message()));
      }
      continue;
    }
    if (key == "chat_template") {
      if (!value.is_string() || value.get<std::string>().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": field chat_template must name a Jinja file in the model's directory"));
      }
      options.chat_template_file = value.get<std::string>();
      continue;
    }
    if (key == "tool_call_format") {
      if (!value.is_string() || !tool_calls::FormatNamed(value.get<std::string>())) {
        return absl::InvalidArgumentError(
            absl::StrCat(path,
                         ": field tool_call_format must be one of hermes, llama3_json, mistral, "
                         "functionary_v3_1, functionary_v3_2, deepseek_v3, generic"));
      }
      options.tool_call_format = value.get<std::string>();
      continue;
    }
    if (key == "weights") {
      const absl::Status format =
          ParseWeightFormat(value.is_string() ? value.get<std::string>() : "", options.weights);
      if (!format.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": field weights: ", format.message()));
      }
      continue;
    }
    const bool may_be_zero =
        key == "max_queue_delay_ms" || key == "int8_group_size" || key == "prefix_cache_tokens";
    if (!value.is_number_integer() || value.get<int64_t>() < (may_be_zero ? 0 : 1) ||
        value.get<int64_t>() > (int64_t{1} << 40)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": field ", key, " must be a ",
                                                     may_be_zero ? "non-negative" : "positive",
                                                     " integer"));
    }
    const int64_t number = value.get<int64_t>();
    if (key == "max_batch_size") {
      options.max_batch_size = number;
    } else if (key == "max_queue_delay_ms") {
      options.max_queue_delay = absl::Milliseconds(number);
    } else if (key == "max_queue_size") {
      options.max_queue_size = number;
    } else if (key == "max_batch_tokens") {
      options.max_batch_tokens = number;
    } else if (key == "step_tokens") {
      options.step_tokens = number;
    } else if (key == "prefill_chunk_tokens") {
      options.prefill_chunk_tokens = number;
    } else if (key == "prefix_cache_tokens") {
      options.prefix_cache_tokens = number;
    } else if (key == "int8_group_size") {
      options.weights.group_size = number;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field ", key, " is not a known setting"));
    }
  }
  return options;
}

absl::Status ParseWeightFormat(const std::string& name, WeightFormat& format) {
  const std::optional<WeightFormat> named = WeightFormatNamed(name, format);
  if (!named) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\" is not a weight format (float32, bf16, int8, int4 or auto)"));
  }
  format = *named;
  return absl::OkStatus();
}

absl::Status ParseKvCacheType(const std::string& name, std::optional<KvCacheType>& type) {
  if (name == "auto") {
    type.reset();
  } else if (const std::optional<KvCacheType> named = KvCacheTypeNamed(name)) {
    type = named;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\" is not a KV cache type (float32, f16, bf16 or auto)"));
  }
  return absl::OkStatus();
}

EngineLoop* ModelRepository::Find(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : it->second.get();
}

std::vector<const EngineLoop*> ModelRepository::workers() const {
  std::vector<const EngineLoop*> list;
  for (const auto& [name, worker] : workers_) list.push_back(worker.get());
  return list;
}

void ModelRepository::DrainAll() {
  for (auto& [name, worker] : workers_) worker->Drain();
}

}  // namespace attnserve::server
