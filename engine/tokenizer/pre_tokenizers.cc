#include "engine/tokenizer/pre_tokenizers.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tokenizer/component_steps.h"
#include "engine/tokenizer/split.h"
#include "engine/tokenizer/unicode.h"

namespace attnserve {

void SplitEach(std::vector<TextSplit>& splits,
               const std::function<std::vector<NormalizedText>(const NormalizedText&)>& split) {
  std::vector<TextSplit> result;
  for (TextSplit& s : splits) {
    if (s.added) {
      result.push_back(std::move(s));
      continue;
    }
    for (NormalizedText& part : split(s.text)) {
      if (!part.normalized().empty()) result.push_back({std::move(part), std::nullopt});
    }
  }
  splits = std::move(result);
}

namespace {

std::vector<NormalizedText> SplitAtChars(const NormalizedText& text,
                                         const std::function<bool(char32_t)>& matches,
                                         SplitBehavior behavior) {
  return Split(text, CharPieces(text.normalized(), matches), behavior);
}

bool IsBertPunctuation(char32_t c) {
  return unicode::IsAsciiPunctuation(c) || unicode::IsPunctuation(c);
}

// BERT's: whitespace removed, each punctuation char a word of its own.
class BertPreTokenizer final : public PreTokenizer {
 public:
  void Apply(std::vector<TextSplit>& splits) const override {
    SplitEach(splits, [](const NormalizedText& text) {
      return SplitAtChars(text, unicode::IsWhitespace, SplitBehavior::kRemoved);
    });
    SplitEach(splits, [](const NormalizedText& text) {
      return SplitAtChars(text, IsBertPunctuation, SplitBehavior::kIsolated);
    });
  }
};

class WhitespaceSplit final : public PreTokenizer {
 public:
  void Apply(std::vector<TextSplit>& splits) const override {
    SplitEach(splits, [](const NormalizedText& text) {
      return SplitAtChars(text, unicode::IsWhitespace, SplitBehavior::kRemoved);
    });
  }
};

class PreTokenizerSequence final : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void Apply(std::vector<TextSplit>& splits) const override {
    for (const auto& step : steps_) step->Apply(splits);
  }

 private:
  const std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const nlohmann::json& json) {
  if (json.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!json.is_object() || !json.contains("type") || !json["type"].is_string()) {
    return absl::InvalidArgumentError("pre_tokenizer: an object with a \"type\" is required");
  }
  const std::string type = json["type"].get<std::string>();
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (type == "Sequence") {
    auto steps =
        ParseSteps<PreTokenizer>(json, "pre_tokenizer", "pretokenizers", PreTokenizerFromJson);
    if (!steps.ok()) return steps.status();
    return std::make_unique<PreTokenizerSequence>(*std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("pre_tokenizer type \"", type, "\" is not supported; supported: ",
                   absl::StrJoin({"BertPreTokenizer", "WhitespaceSplit", "Sequence"}, ", ")));
}

}  // namespace attnserve
