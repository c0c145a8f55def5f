#include "engine/importers/hf_tensors.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/importers/hf_importers.h"

namespace attnserve {

absl::StatusOr<HfTensors> HfTensors::Open(const std::string& directory) {
  HfTensors tensors;
  std::vector<std::string> shards;
  const std::string single = directory + "/model.safetensors";
  const std::string index_path = directory + "/model.safetensors.index.json";
  if (std::filesystem::exists(single)) {
    shards.push_back("model.safetensors");
  } else if (std::filesystem::exists(index_path)) {
    ASSIGN_OR_RETURN(const nlohmann::json index, ReadJsonFile(index_path));
    const auto map = index.is_object() ? index.find("weight_map") : index.end();
    if (map == index.end() || !map->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": field weight_map (tensor name -> file) is missing"));
    }
    for (const auto& [name, file] : map->items()) {
      const std::string shard = file.is_string() ? file.get<std::string>() : "";
      // A file of the snapshot directory: no way out of it.
      if (shard.empty() || absl::StrContains(shard, "/") || absl::StrContains(shard, "..")) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": field weight_map.", name,
                                                       " must name a file in the directory"));
      }
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
    if (shards.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map is empty"));
    }
  } else {
    return absl::NotFoundError(absl::StrCat(
        directory,
        ": no model.safetensors or model.safetensors.index.json (a pytorch_model.bin is not "
        "read: save the model with safe_serialization=True)"));
  }
  for (const std::string& shard : shards) {
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(directory + "/" + shard));
    tensors.files_.push_back(std::make_shared<SafetensorsFile>(std::move(file)));
    for (const std::string& name : tensors.files_.back()->names()) {
      if (tensors.file_of_.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat(tensors.files_.back()->path(), ": tensor '",
                                                       name, "' is also in ",
                                                       tensors.file_of_[name]->path()));
      }
      tensors.file_of_[name] = tensors.files_.back().get();
      tensors.taken_[name] = false;
    }
  }
  return tensors;
}

bool HfTensors::Has(const std::string& name) const { return file_of_.count(prefix_ + name) > 0; }

absl::StatusOr<Tensor> HfTensors::Take(const std::string& name, const Shape& shape) {
  return TakeOutsidePrefix(prefix_ + name, shape);
}

absl::StatusOr<Tensor> HfTensors::TakeOutsidePrefix(const std::string& full, const Shape& shape) {
  auto file = file_of_.find(full);
  if (file == file_of_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(first_path(), ": missing tensor '", full,
                                                   "' of shape ", ShapeToString(shape)));
  }
  ASSIGN_OR_RETURN(Tensor tensor, file->second->Float32(full));
  if (tensor.shape() != shape) {
    return absl::InvalidArgumentError(absl::StrCat(file->second->path(), ": tensor '", full,
                                                   "' has shape ", tensor.ShapeString(),
                                                   ", config.json implies ", ShapeToString(shape)));
  }
  taken_[full] = true;
  return tensor;
}

absl::StatusOr<Tensor> HfTensors::TakeEither(const std::vector<std::string>& names,
                                             const Shape& shape) {
  for (const std::string& name : names) {
    if (Has(name)) return Take(name, shape);
  }
  return Take(names.front(), shape);  // the error names the first
}

absl::Status HfTensors::CheckAllTaken(const std::vector<std::string>& ignored_prefixes,
                                      const std::vector<std::string>& ignored_suffixes) const {
  for (const auto& [name, taken] : taken_) {
    if (taken) continue;
    const std::string local = absl::StartsWith(name, prefix_) ? name.substr(prefix_.size()) : name;
    bool ignored = false;
    for (const std::string& p : ignored_prefixes) ignored |= absl::StartsWith(local, p);
    for (const std::string& s : ignored_suffixes) ignored |= absl::EndsWith(local, s);
    if (!ignored) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_of_.at(name)->path(), ": unexpected tensor '", name,
                       "' (not part of the architecture config.json names)"));
    }
  }
  return absl::OkStatus();
}

Tensor Transposed(const Tensor& matrix) {
  const int64_t rows = matrix.dim(0), cols = matrix.dim(1);
  Tensor out({cols, rows});
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = matrix.row(r);
    for (int64_t c = 0; c < cols; ++c) out.data()[c * rows + r] = in[c * matrix.stride(1)];
  }
  return out;
}

}  // namespace attnserve
