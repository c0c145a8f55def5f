// Post-processors of tokenizer.json (REFERENCE.md §8): the special tokens around a sequence, as
// "[CLS] $A [SEP]", or a pair, as "[CLS] $A [SEP] $B:1 [SEP]:1" (TemplateProcessing,
// BertProcessing, RobertaProcessing), and the trimming of byte-level tokens' offsets to exclude
// their spaces (ByteLevel, RobertaProcessing).
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
  // A pair (a query and a document), joined as the pair template joins them, with its type ids.
  // An error if the tokenizer has no pair template.
  virtual absl::StatusOr<Encoding> ProcessPair(Encoding first, const std::string& first_text,
                                               Encoding second, const std::string& second_text,
                                               bool add_special_tokens) const = 0;
  // How many special tokens Process (pair false) or ProcessPair (true) adds: what truncation
  // leaves room for.
  virtual size_t AddedTokens(bool pair) const = 0;
  // False for a step that only adjusts each sequence (ByteLevel's trimming) in a Sequence.
  virtual bool JoinsPairs() const { return true; }
};

// Two sequences joined without special tokens, the second's tokens of type `second_type`.
Encoding JoinPair(Encoding first, Encoding second, uint8_t second_type);

// From tokenizer.json's "post_processor" (null: none); an unsupported type is an error naming it.
absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessorFromJson(const nlohmann::json& json);

}  // namespace attnserve
