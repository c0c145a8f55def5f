#include "text/tokenizer/pre_tokenizers.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/component_steps.h"
#include "text/tokenizer/metaspace_options.h"
#include "text/tokenizer/onig_regex.h"
#include "text/tokenizer/split.h"
#include "text/tokenizer/unicode.h"

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

// Whitespace: runs of word chars and runs of other non-space chars, the regex crate's
// \w+|[^\w\s]+, everything else removed.
class Whitespace final : public PreTokenizer {
 public:
  void Apply(std::vector<TextSplit>& splits) const override {
    SplitEach(splits, [](const NormalizedText& text) {
      std::vector<Piece> pieces;
      const std::string& s = text.normalized();
      size_t at = 0, gap = 0;
      while (at < s.size()) {
        const unicode::Decoded d = unicode::DecodeUtf8(std::string_view(s).substr(at));
        if (unicode::IsWhitespace(d.code_point)) {
          at += d.bytes;
          continue;
        }
        const bool word = unicode::IsWordChar(d.code_point);
        size_t end = at + d.bytes;
        while (end < s.size()) {
          const unicode::Decoded next = unicode::DecodeUtf8(std::string_view(s).substr(end));
          if (unicode::IsWordChar(next.code_point) != word ||
              (!word && unicode::IsWhitespace(next.code_point))) {
            break;
          }
          end += next.bytes;
        }
        if (gap < at) pieces.push_back({{gap, at}, true});
        pieces.push_back({{at, end}, false});
        at = gap = end;
      }
      if (gap < s.size()) pieces.push_back({{gap, s.size()}, true});
      return Split(text, pieces, SplitBehavior::kRemoved);
    });
  }
};

// GPT-2's: an optional space before each split, GPT-2's regex, then every byte as its char of
// the byte-level alphabet.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<OnigRegex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  void Apply(std::vector<TextSplit>& splits) const override {
    SplitEach(splits, [this](const NormalizedText& text) {
      NormalizedText prefixed = text;
      if (add_prefix_space_ && !prefixed.normalized().starts_with(' ')) prefixed.Prepend(" ");
      if (!regex_) return std::vector<NormalizedText>{std::move(prefixed)};
      return Split(prefixed, regex_->Pieces(prefixed.normalized()), SplitBehavior::kIsolated);
    });
    for (TextSplit& split : splits) {
      if (split.added) continue;
      std::vector<NormalizedText::Edit> edits;
      for (char32_t c : CodePoints(split.text.normalized())) {
        std::string bytes;
        unicode::AppendUtf8(c, bytes);
        for (size_t i = 0; i < bytes.size(); ++i) {
          edits.push_back({byte_level::ByteToChar(static_cast<uint8_t>(bytes[i])), i == 0 ? 0 : 1});
        }
      }
      split.text.Transform(edits, 0);
    }
  }

 private:
  const bool add_prefix_space_;
  const std::optional<OnigRegex> regex_;
};

// SentencePiece's: spaces become the replacement char (▁), which starts each word.
class Metaspace final : public PreTokenizer {
 public:
  explicit Metaspace(MetaspaceOptions options) : options_(std::move(options)) {}

  void Apply(std::vector<TextSplit>& splits) const override {
    SplitEach(splits, [this](const NormalizedText& text) {
      const std::string& replacement = options_.replacement_utf8;
      NormalizedText replaced = text;
      std::vector<ByteRange> spaces;
      for (size_t i = 0; i < replaced.normalized().size(); ++i) {
        if (replaced.normalized()[i] == ' ') spaces.push_back({i, i + 1});
      }
      if (!spaces.empty()) replaced.Replace(spaces, replacement);
      const PrependScheme scheme = options_.prepend_scheme;
      const bool prepend = scheme == PrependScheme::kAlways ||
                           (scheme == PrependScheme::kFirst && replaced.original_shift() == 0);
      if (prepend && !replaced.normalized().starts_with(replacement)) {
        replaced.Prepend(replacement);
      }
      if (!options_.split) return std::vector<NormalizedText>{std::move(replaced)};
      const char32_t c = options_.replacement;
      return Split(replaced, CharPieces(replaced.normalized(), [c](char32_t x) { return x == c; }),
                   SplitBehavior::kMergedWithNext);
    });
  }

 private:
  const MetaspaceOptions options_;
};

// Split: at the matches of a pattern (or between them, inverted), with a delimiter behaviour.
class PatternSplit final : public PreTokenizer {
 public:
  PatternSplit(OnigRegex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  void Apply(std::vector<TextSplit>& splits) const override {
    SplitEach(splits, [this](const NormalizedText& text) {
      std::vector<Piece> pieces = regex_.Pieces(text.normalized());
      if (invert_) {
        for (Piece& piece : pieces) piece.delimiter = !piece.delimiter;
      }
      return Split(text, pieces, behavior_);
    });
  }

 private:
  const OnigRegex regex_;
  const SplitBehavior behavior_;
  const bool invert_;
};

// Punctuation and Digits: at the chars of a class, with a delimiter behaviour.
class CharClassSplit final : public PreTokenizer {
 public:
  CharClassSplit(bool (*matches)(char32_t), SplitBehavior behavior)
      : matches_(matches), behavior_(behavior) {}
  void Apply(std::vector<TextSplit>& splits) const override {
    SplitEach(splits, [this](const NormalizedText& text) {
      return SplitAtChars(text, matches_, behavior_);
    });
  }

 private:
  bool (*const matches_)(char32_t);
  const SplitBehavior behavior_;
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

absl::StatusOr<bool> Flag(const nlohmann::json& json, const char* name,
                          std::optional<bool> fallback) {
  auto it = json.find(name);
  if (it == json.end() || it->is_null()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(
        absl::StrCat("pre_tokenizer.", name, ": a boolean is required"));
  }
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pre_tokenizer.", name, ": a boolean is required"));
  }
  return it->get<bool>();
}

absl::StatusOr<SplitBehavior> Behavior(const nlohmann::json& json,
                                       std::optional<SplitBehavior> fallback) {
  auto it = json.find("behavior");
  if ((it == json.end() || it->is_null()) && fallback) return *fallback;
  static const std::pair<const char*, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  if (it != json.end() && it->is_string()) {
    for (const auto& [name, behavior] : kNames) {
      if (*it == name) return behavior;
    }
  }
  return absl::InvalidArgumentError(
      "pre_tokenizer.behavior: one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
      "Contiguous is required");
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const nlohmann::json& json) {
  if (json.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!json.is_object() || !json.contains("type") || !json["type"].is_string()) {
    return absl::InvalidArgumentError("pre_tokenizer: an object with a \"type\" is required");
  }
  const std::string type = json["type"].get<std::string>();
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(const bool add_prefix_space, Flag(json, "add_prefix_space", std::nullopt));
    ASSIGN_OR_RETURN(const bool use_regex, Flag(json, "use_regex", true));
    std::optional<OnigRegex> regex;
    if (use_regex) {
      ASSIGN_OR_RETURN(
          regex,
          OnigRegex::Compile(
              R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"));
    }
    return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
  }
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(MetaspaceOptions options, MetaspaceOptions::FromJson(json, "pre_tokenizer"));
    return std::make_unique<Metaspace>(std::move(options));
  }
  if (type == "Split") {
    ASSIGN_OR_RETURN(OnigRegex regex, PatternFromJson(json, "pre_tokenizer"));
    ASSIGN_OR_RETURN(const SplitBehavior behavior, Behavior(json, std::nullopt));
    ASSIGN_OR_RETURN(const bool invert, Flag(json, "invert", false));
    return std::make_unique<PatternSplit>(std::move(regex), behavior, invert);
  }
  if (type == "Punctuation") {
    ASSIGN_OR_RETURN(const SplitBehavior behavior, Behavior(json, SplitBehavior::kIsolated));
    return std::make_unique<CharClassSplit>(IsBertPunctuation, behavior);
  }
  if (type == "Digits") {
    ASSIGN_OR_RETURN(const bool individual, Flag(json, "individual_digits", false));
    return std::make_unique<CharClassSplit>(
        unicode::IsNumeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto steps, ParseSteps<PreTokenizer>(json, "pre_tokenizer", "pretokenizers",
                                                          PreTokenizerFromJson));
    return std::make_unique<PreTokenizerSequence>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("pre_tokenizer type \"", type, "\" is not supported; supported: ",
                   absl::StrJoin({"BertPreTokenizer", "ByteLevel", "Whitespace", "WhitespaceSplit",
                                  "Metaspace", "Split", "Punctuation", "Digits", "Sequence"},
                                 ", ")));
}

}  // namespace attnserve
