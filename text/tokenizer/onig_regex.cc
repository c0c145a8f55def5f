#include "text/tokenizer/onig_regex.h"

#include <oniguruma.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {

struct OnigRegex::Compiled {
  regex_t* regex = nullptr;
  ~Compiled() { onig_free(regex); }
};

namespace {

void InitializeOniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

std::string OnigErrorText(int code, OnigErrorInfo* info) {
  OnigUChar text[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int length = onig_error_code_to_str(text, code, info);
  return std::string(reinterpret_cast<const char*>(text), length > 0 ? length : 0);
}

}  // namespace

absl::StatusOr<OnigRegex> OnigRegex::Compile(const std::string& pattern) {
  InitializeOniguruma();
  auto compiled = std::make_shared<Compiled>();
  OnigErrorInfo info;
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int code = onig_new(&compiled->regex, begin, begin + pattern.size(), ONIG_OPTION_NONE,
                            ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &info);
  if (code != ONIG_NORMAL) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex \"", pattern, "\" does not compile: ", OnigErrorText(code, &info)));
  }
  OnigRegex regex;
  regex.compiled_ = std::move(compiled);
  return regex;
}

absl::StatusOr<OnigRegex> OnigRegex::Literal(const std::string& text) {
  // The metacharacters that the reference's regex::escape escapes.
  std::string pattern;
  for (char c : text) {
    if (std::string_view("\\.+*?()|[]{}^$#&-~").find(c) != std::string_view::npos) {
      pattern += '\\';
    }
    pattern += c;
  }
  auto regex = Compile(pattern);
  if (regex.ok()) regex->literal_ = text;
  return regex;
}

std::vector<ByteRange> OnigRegex::FindAll(std::string_view text) const {
  std::vector<ByteRange> matches;
  if (!literal_.empty()) {
    for (size_t at = text.find(literal_); at != std::string_view::npos;
         at = text.find(literal_, at + literal_.size())) {
      matches.push_back({at, at + literal_.size()});
    }
    return matches;
  }
  OnigRegion* region = onig_region_new();
  const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = begin + text.size();
  size_t from = 0;
  bool matched_before = false;
  size_t last_match_end = 0;
  while (from <= text.size()) {
    const int at =
        onig_search(compiled_->regex, begin, end, begin + from, end, region, ONIG_OPTION_NONE);
    if (at < 0) break;
    const size_t match_begin = region->beg[0], match_end = region->end[0];
    if (match_begin == match_end && matched_before && last_match_end == match_end) {
      from += from < text.size() ? unicode::DecodeUtf8(text.substr(from)).bytes : 1;
      continue;
    }
    matches.push_back({match_begin, match_end});
    from = match_end;
    last_match_end = match_end;
    matched_before = true;
  }
  onig_region_free(region, 1);
  return matches;
}

std::vector<Piece> OnigRegex::Pieces(std::string_view text) const {
  if (text.empty()) return {{{0, 0}, false}};
  std::vector<Piece> pieces;
  size_t previous = 0;
  for (const ByteRange& match : FindAll(text)) {
    if (previous < match.begin) pieces.push_back({{previous, match.begin}, false});
    pieces.push_back({match, true});
    previous = match.end;
  }
  if (previous < text.size()) pieces.push_back({{previous, text.size()}, false});
  return pieces;
}

absl::StatusOr<OnigRegex> PatternFromJson(const nlohmann::json& json, const std::string& where) {
  auto it = json.find("pattern");
  if (it != json.end() && it->is_object() && it->size() == 1) {
    if (it->contains("String") && (*it)["String"].is_string()) {
      return OnigRegex::Literal((*it)["String"].get<std::string>());
    }
    if (it->contains("Regex") && (*it)["Regex"].is_string()) {
      auto regex = OnigRegex::Compile((*it)["Regex"].get<std::string>());
      if (!regex.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".pattern: ", regex.status().message()));
      }
      return regex;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ".pattern: {\"String\": s} or {\"Regex\": r} is required"));
}

}  // namespace attnserve
