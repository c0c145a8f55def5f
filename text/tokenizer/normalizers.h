// Normalizers of tokenizer.json (REFERENCE.md §4): each edits a NormalizedText in place, keeping
// its alignments.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "text/tokenizer/normalized_text.h"

namespace attnserve {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Apply(NormalizedText& text) const = 0;
};

// From tokenizer.json's "normalizer" (null: none); an unsupported type is an error naming it.
absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const nlohmann::json& json);

}  // namespace attnserve
