// tokenizer.json read as the reference library reads it: its JSON parser (serde_json, without
// its float_roundtrip feature) turns a decimal number into the nearest double of significand and
// power of ten computed in double arithmetic, which is not always the nearest double to the
// number. Unigram scores parsed otherwise can differ in their last bit, and a tie between two
// segmentations then goes the other way.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace attnserve {

// An error names the byte offset of a syntax error or of a number out of range.
absl::StatusOr<nlohmann::json> ParseReferenceJson(const std::string& text);

// One JSON number's text (as nlohmann reads it) as serde_json's default parser reads it.
absl::StatusOr<double> ReferenceDouble(const std::string& number);

}  // namespace attnserve
