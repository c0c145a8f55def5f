#include "server/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

namespace attnserve::server {

std::unique_ptr<ModelRepository> ModelRepository::Load(const std::string& root,
                                                       const WorkerOptions& options,
                                                       ServerMetrics& metrics) {
  auto repository = std::make_unique<ModelRepository>();
  std::error_code error;
  std::vector<std::filesystem::path> directories;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    if (entry.is_directory()) directories.push_back(entry.path());
  }
  if (error) {
    repository->failures_[root] = "cannot list the model repository: " + error.message();
  }
  std::sort(directories.begin(), directories.end());
  for (const auto& directory : directories) {
    const std::string name = directory.filename().string();
    auto model = LoadModel(directory.string());
    if (!model.ok()) {
      std::cerr << "attnserve: model " << name << " not loaded: " << model.status().message()
                << "\n";
      repository->failures_[name] = std::string(model.status().message());
      continue;
    }
    std::cerr << "attnserve: model " << name << " loaded (" << (*model)->config.architecture
              << ")\n";
    repository->workers_[name] =
        std::make_unique<ModelWorker>(name, *std::move(model), options, metrics);
  }
  return repository;
}

ModelWorker* ModelRepository::Find(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : it->second.get();
}

std::vector<const ModelWorker*> ModelRepository::workers() const {
  std::vector<const ModelWorker*> list;
  for (const auto& [name, worker] : workers_) list.push_back(worker.get());
  return list;
}

void ModelRepository::DrainAll() {
  for (auto& [name, worker] : workers_) worker->Drain();
}

std::vector<std::string> SupportedMethods(const Model& model) {
  if (model.causal_lm || model.seq2seq) return {"NextToken", "Generate", "Score"};
  if (model.next_word) return {"NextToken"};
  if (model.encoder || model.perceiver_io || model.set_transformer) return {"Embed"};
  return {};
}

}  // namespace attnserve::server
