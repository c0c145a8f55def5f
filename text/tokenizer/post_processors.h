// Post-processors of tokenizer.json (REFERENCE.md §8): the special tokens around a sequence, as
// "[CLS] $A [SEP]" (TemplateProcessing, BertProcessing, RobertaProcessing), and the trimming of
// byte-level tokens' offsets to exclude their spaces (ByteLevel, RobertaProcessing).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "text/tokenizer/encoding.h"

namespace attnserve {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // One sequence of `text`; `add_special_tokens` false adds none.
  virtual Encoding Process(Encoding sequence, const std::string& text,
                           bool add_special_tokens) const = 0;
};

// From tokenizer.json's "post_processor" (null: none); an unsupported type is an error naming it.
absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessorFromJson(const nlohmann::json& json);

}  // namespace attnserve
