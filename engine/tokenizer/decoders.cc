#include "engine/tokenizer/decoders.h"

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "engine/tokenizer/component_steps.h"

namespace attnserve {
namespace {

// BERT's: the continuing-subword prefix joins a piece to the one before it, other tokens are
// separated by a space; `cleanup` removes the spaces English punctuation does not take.
class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}

  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      if (i != 0) {
        if (absl::StartsWith(token, prefix_)) {
          token.erase(0, prefix_.size());
        } else {
          token = absl::StrCat(" ", token);
        }
      }
      if (cleanup_) token = Cleanup(token);
    }
    return tokens;
  }

 private:
  static std::string Cleanup(const std::string& text) {
    std::string out = text;
    for (const auto& [from, to] :
         std::vector<std::pair<std::string, std::string>>{{" .", "."},
                                                          {" ?", "?"},
                                                          {" !", "!"},
                                                          {" ,", ","},
                                                          {" ' ", "'"},
                                                          {" n't", "n't"},
                                                          {" 'm", "'m"},
                                                          {" do not", " don't"},
                                                          {" 's", "'s"},
                                                          {" 've", "'ve"},
                                                          {" 're", "'re"}}) {
      out = absl::StrReplaceAll(out, {{from, to}});
    }
    return out;
  }

  const std::string prefix_;
  const bool cleanup_;
};

class DecoderSequence final : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_) tokens = step->DecodeChain(std::move(tokens));
    return tokens;
  }

 private:
  const std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const nlohmann::json& json) {
  if (json.is_null()) return std::unique_ptr<Decoder>();
  if (!json.is_object() || !json.contains("type") || !json["type"].is_string()) {
    return absl::InvalidArgumentError("decoder: an object with a \"type\" is required");
  }
  const std::string type = json["type"].get<std::string>();
  if (type == "WordPiece") {
    std::string prefix = "##";
    bool cleanup = true;
    if (json.contains("prefix")) {
      if (!json["prefix"].is_string()) {
        return absl::InvalidArgumentError("decoder.prefix: a string is required");
      }
      prefix = json["prefix"].get<std::string>();
    }
    if (json.contains("cleanup")) {
      if (!json["cleanup"].is_boolean()) {
        return absl::InvalidArgumentError("decoder.cleanup: a boolean is required");
      }
      cleanup = json["cleanup"].get<bool>();
    }
    return std::make_unique<WordPieceDecoder>(std::move(prefix), cleanup);
  }
  if (type == "Sequence") {
    auto steps = ParseSteps<Decoder>(json, "decoder", "decoders", DecoderFromJson);
    if (!steps.ok()) return steps.status();
    return std::make_unique<DecoderSequence>(*std::move(steps));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "decoder type \"", type,
      "\" is not supported; supported: ", absl::StrJoin({"WordPiece", "Sequence"}, ", ")));
}

}  // namespace attnserve
