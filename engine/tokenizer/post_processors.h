// Post-processors of tokenizer.json (REFERENCE.md §8): the special tokens around a sequence, as
// "[CLS] $A [SEP]" (TemplateProcessing, BertProcessing).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/tokenizer/encoding.h"
#include "nlohmann/json_fwd.hpp"

namespace attnserve {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // One sequence; `add_special_tokens` false leaves it as it is.
  virtual Encoding Process(Encoding sequence, bool add_special_tokens) const = 0;
};

// From tokenizer.json's "post_processor" (null: none); an unsupported type is an error naming it.
absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessorFromJson(const nlohmann::json& json);

}  // namespace attnserve
