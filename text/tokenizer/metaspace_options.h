// The options that the Metaspace pre-tokenizer and decoder share (REFERENCE.md §5.5): the char
// that stands for a space (SentencePiece's ▁), when a word gets one in front, and whether words
// are split at it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace attnserve {

enum class PrependScheme { kAlways, kFirst, kNever };

struct MetaspaceOptions {
  char32_t replacement = U'\u2581';
  std::string replacement_utf8;
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;

  // `part` ("pre_tokenizer" or "decoder") names the object in errors.
  static absl::StatusOr<MetaspaceOptions> FromJson(const nlohmann::json& json, const char* part);
};

}  // namespace attnserve
