// The tensors of a Hugging Face checkpoint, by the checkpoint's names: model.safetensors, or the
// shards that model.safetensors.index.json maps them to. Taken one by one with the shape the
// config implies; what nobody took and no rule allows to leave is an error.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/safetensors.h"

namespace attnserve {

class HfTensors {
 public:
  static absl::StatusOr<HfTensors> Open(const std::string& directory);

  // Names are read after `prefix` (a task model's "bert.", "transformer.").
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  bool Has(const std::string& name) const;
  // The tensor `name`, which must have `shape`; errors name its file.
  absl::StatusOr<Tensor> Take(const std::string& name, const Shape& shape);
  // The same for `name` itself, not after the prefix (a task model's head beside its base).
  absl::StatusOr<Tensor> TakeOutsidePrefix(const std::string& name, const Shape& shape);
  // The first of `names` that the checkpoint has (LayerNorm's "weight" or older "gamma").
  absl::StatusOr<Tensor> TakeEither(const std::vector<std::string>& names, const Shape& shape);

  // An error naming the first tensor nobody took, unless its name (after the prefix, or whole)
  // starts with one of `ignored_prefixes` or ends with one of `ignored_suffixes`.
  absl::Status CheckAllTaken(const std::vector<std::string>& ignored_prefixes,
                             const std::vector<std::string>& ignored_suffixes) const;

  const std::string& first_path() const { return files_.front()->path(); }
  FileBytes first_file_bytes() const { return files_.front()->bytes(); }

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> file_of_;  // every tensor's file
  std::map<std::string, bool> taken_;
  std::string prefix_;
};

// A contiguous copy of a 2-D tensor, transposed (GPT-2's Conv1D stores weights [in, out]).
Tensor Transposed(const Tensor& matrix);

}  // namespace attnserve
