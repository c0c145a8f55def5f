// Decoders of tokenizer.json (REFERENCE.md §10): token strings back to text.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace attnserve {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Each step of a chain maps the token strings to new ones; the result is their concatenation.
  virtual std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const = 0;
  // The bytes `token` stands for when a step reads tokens as bytes (ByteLevel's alphabet,
  // ByteFallback's "<0xAB>"), before they are read as UTF-8; nullopt when it stands for text.
  virtual std::optional<std::string> TokenBytes(const std::string& /*token*/) const {
    return std::nullopt;
  }
};

// From tokenizer.json's "decoder" (null: none, the tokens are joined with spaces); an unsupported
// type is an error naming it.
absl::StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const nlohmann::json& json);

}  // namespace attnserve
