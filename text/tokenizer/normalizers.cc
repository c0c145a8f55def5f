#include "text/tokenizer/normalizers.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "text/tokenizer/component_steps.h"
#include "text/tokenizer/onig_regex.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {
namespace {

// BERT's: control chars removed and whitespace made ' ', CJK chars spaced, accents stripped,
// lowercased.
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese_chars, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        chinese_chars_(chinese_chars),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  void Apply(NormalizedText& text) const override {
    if (clean_text_) {
      text.Filter([](char32_t c) {
        const bool control = c != '\t' && c != '\n' && c != '\r' && unicode::IsOther(c);
        return c != 0 && c != 0xFFFD && !control;
      });
      text.Map([](char32_t c) {
        return c == '\t' || c == '\n' || c == '\r' || unicode::IsWhitespace(c) ? U' ' : c;
      });
    }
    if (chinese_chars_) {
      std::vector<NormalizedText::Edit> edits;
      bool any = false;
      for (char32_t c : CodePoints(text.normalized())) {
        if (unicode::IsChineseChar(c)) {
          edits.insert(edits.end(), {{U' ', 0}, {c, 1}, {U' ', 1}});
          any = true;
        } else {
          edits.push_back({c, 0});
        }
      }
      if (any) text.Transform(edits, 0);
    }
    if (strip_accents_) {
      text.Normalize(NormalizedText::Form::kNfd);
      text.Filter([](char32_t c) { return !unicode::IsNonspacingMark(c); });
    }
    if (lowercase_) text.Lowercase();
  }

 private:
  const bool clean_text_, chinese_chars_, strip_accents_, lowercase_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizedText::Form form) : form_(form) {}
  void Apply(NormalizedText& text) const override { text.Normalize(form_); }

 private:
  const NormalizedText::Form form_;
};

class Lowercase final : public Normalizer {
 public:
  void Apply(NormalizedText& text) const override { text.Lowercase(); }
};

class StripAccents final : public Normalizer {
 public:
  void Apply(NormalizedText& text) const override {
    text.Filter([](char32_t c) { return !unicode::IsCombiningMark(c); });
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void Apply(NormalizedText& text) const override { text.Strip(left_, right_); }

 private:
  const bool left_, right_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void Apply(NormalizedText& text) const override { text.Prepend(prefix_); }

 private:
  const std::string prefix_;
};

// Each match of a pattern replaced by `content`.
class Replace final : public Normalizer {
 public:
  Replace(OnigRegex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Apply(NormalizedText& text) const override {
    if (text.normalized().empty()) return;  // the reference finds no match, not even "^"
    const std::vector<ByteRange> matches = pattern_.FindAll(text.normalized());
    if (!matches.empty()) text.Replace(matches, content_);
  }

 private:
  const OnigRegex pattern_;
  const std::string content_;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void Apply(NormalizedText& text) const override {
    for (const auto& step : steps_) step->Apply(text);
  }

 private:
  const std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<bool> Flag(const nlohmann::json& json, const char* name, bool fallback) {
  auto it = json.find(name);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("normalizer.", name, " is not a boolean"));
  }
  return it->get<bool>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const nlohmann::json& json) {
  if (json.is_null()) return std::unique_ptr<Normalizer>();
  if (!json.is_object() || !json.contains("type") || !json["type"].is_string()) {
    return absl::InvalidArgumentError("normalizer: an object with a \"type\" is required");
  }
  const std::string type = json["type"].get<std::string>();
  if (type == "BertNormalizer") {
    ASSIGN_OR_RETURN(const bool clean, Flag(json, "clean_text", true));
    ASSIGN_OR_RETURN(const bool chinese, Flag(json, "handle_chinese_chars", true));
    ASSIGN_OR_RETURN(const bool lowercase, Flag(json, "lowercase", true));
    ASSIGN_OR_RETURN(const bool strip, Flag(json, "strip_accents", lowercase));
    return std::make_unique<BertNormalizer>(clean, chinese, strip, lowercase);
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalizedText::Form::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalizedText::Form::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalizedText::Form::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalizedText::Form::kNfkd);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip") {
    ASSIGN_OR_RETURN(const bool left, Flag(json, "strip_left", true));
    ASSIGN_OR_RETURN(const bool right, Flag(json, "strip_right", true));
    return std::make_unique<Strip>(left, right);
  }
  if (type == "Prepend") {
    if (!json.contains("prepend") || !json["prepend"].is_string()) {
      return absl::InvalidArgumentError("normalizer.prepend: a string is required");
    }
    return std::make_unique<Prepend>(json["prepend"].get<std::string>());
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(OnigRegex pattern, PatternFromJson(json, "normalizer"));
    if (!json.contains("content") || !json["content"].is_string()) {
      return absl::InvalidArgumentError("normalizer.content: a string is required");
    }
    return std::make_unique<Replace>(std::move(pattern), json["content"].get<std::string>());
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto steps,
                     ParseSteps<Normalizer>(json, "normalizer", "normalizers", NormalizerFromJson));
    return std::make_unique<NormalizerSequence>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("normalizer type \"", type, "\" is not supported; supported: ",
                   absl::StrJoin({"BertNormalizer", "NFC", "NFD", "NFKC", "NFKD", "Lowercase",
                                  "StripAccents", "Strip", "Replace", "Prepend", "Sequence"},
                                 ", ")));
}

}  // namespace attnserve
