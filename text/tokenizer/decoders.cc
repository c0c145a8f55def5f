#include "text/tokenizer/decoders.h"

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/component_steps.h"
#include "text/tokenizer/metaspace_options.h"
#include "text/tokenizer/normalized_text.h"
#include "text/tokenizer/onig_regex.h"
#include "text/tokenizer/unicode.h"

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

// GPT-2's: byte-level chars back to bytes, the bytes read as UTF-8 (invalid parts replaced).
class ByteLevelDecoder final : public Decoder {
 public:
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    std::string bytes;
    // A token with a char outside the alphabet (an added token) stands for its own UTF-8.
    for (const std::string& token : tokens) bytes += TokenBytes(token).value_or(token);
    return {unicode::DecodeLossy(bytes)};
  }
  std::optional<std::string> TokenBytes(const std::string& token) const override {
    std::string bytes;
    for (char32_t c : CodePoints(token)) {
      const int b = byte_level::CharToByte(c);
      if (b < 0) return std::nullopt;
      bytes += static_cast<char>(b);
    }
    return bytes;
  }
};

// SentencePiece's ▁ back to spaces; the first token's are dropped when words were prefixed.
class MetaspaceDecoder final : public Decoder {
 public:
  explicit MetaspaceDecoder(MetaspaceOptions options) : options_(std::move(options)) {}
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = i == 0 && options_.prepend_scheme != PrependScheme::kNever;
      std::string out;
      for (char32_t c : CodePoints(tokens[i])) {
        if (c != options_.replacement) {
          unicode::AppendUtf8(c, out);
        } else if (!drop) {
          out += ' ';
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  const MetaspaceOptions options_;
};

// Runs of "<0xAB>" tokens as the UTF-8 they spell; a run that is not UTF-8 gives one U+FFFD per
// byte, as the reference does.
class ByteFallbackDecoder final : public Decoder {
 public:
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_tokens = 0;
    const auto flush = [&] {
      if (run_tokens == 0) return;
      if (unicode::IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_tokens; ++i) out.push_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_tokens = 0;
    };
    for (std::string& token : tokens) {
      if (const int byte = ByteToken(token); byte >= 0) {
        run += static_cast<char>(byte);
        ++run_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    return out;
  }
  std::optional<std::string> TokenBytes(const std::string& token) const override {
    const int byte = ByteToken(token);
    if (byte < 0) return std::nullopt;
    return std::string(1, static_cast<char>(byte));
  }

 private:
  // The byte of "<0xAB>" (hex digits of either case, or a '+' and one digit, as Rust's
  // u8::from_str_radix reads them), or -1.
  static int ByteToken(const std::string& token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
    const auto digit = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int high = digit(token[3]), low = digit(token[4]);
    if (token[3] == '+' && low >= 0) return low;
    return high >= 0 && low >= 0 ? high * 16 + low : -1;
  }
};

class FuseDecoder final : public Decoder {
 public:
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    return {absl::StrJoin(tokens, "")};
  }
};

// Up to `start` leading and `stop` trailing `content` chars removed from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) {
      const std::vector<char32_t> chars = CodePoints(token);
      size_t begin = 0, end = chars.size();
      while (begin < std::min(start_, chars.size()) && chars[begin] == content_) ++begin;
      while (chars.size() - end < stop_ && end > begin && chars[end - 1] == content_) --end;
      std::string out;
      for (size_t i = begin; i < end; ++i) unicode::AppendUtf8(chars[i], out);
      token = std::move(out);
    }
    return tokens;
  }

 private:
  const char32_t content_;
  const size_t start_, stop_;
};

// Each match of a pattern in each token replaced by `content`.
class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(OnigRegex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) {
      if (token.empty()) continue;  // the reference finds no match, not even "^"
      std::string out;
      size_t previous = 0;
      for (const ByteRange& match : pattern_.FindAll(token)) {
        out.append(token, previous, match.begin - previous);
        out += content_;
        previous = match.end;
      }
      out.append(token, previous);
      token = std::move(out);
    }
    return tokens;
  }

 private:
  const OnigRegex pattern_;
  const std::string content_;
};

absl::StatusOr<size_t> Count(const nlohmann::json& json, const char* name) {
  auto it = json.find(name);
  if (it == json.end() || !it->is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoder.", name, ": a non-negative integer is required"));
  }
  return it->get<size_t>();
}

class DecoderSequence final : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_) tokens = step->DecodeChain(std::move(tokens));
    return tokens;
  }
  std::optional<std::string> TokenBytes(const std::string& token) const override {
    for (const auto& step : steps_) {
      if (auto bytes = step->TokenBytes(token)) return bytes;
    }
    return std::nullopt;
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
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(MetaspaceOptions options, MetaspaceOptions::FromJson(json, "decoder"));
    return std::make_unique<MetaspaceDecoder>(std::move(options));
  }
  if (type == "Strip") {
    auto content = json.find("content");
    if (content == json.end() || !content->is_string() ||
        CodePoints(content->get<std::string>()).size() != 1) {
      return absl::InvalidArgumentError("decoder.content: one char is required");
    }
    ASSIGN_OR_RETURN(const size_t start, Count(json, "start"));
    ASSIGN_OR_RETURN(const size_t stop, Count(json, "stop"));
    return std::make_unique<StripDecoder>(CodePoints(content->get<std::string>())[0], start, stop);
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(OnigRegex pattern, PatternFromJson(json, "decoder"));
    if (!json.contains("content") || !json["content"].is_string()) {
      return absl::InvalidArgumentError("decoder.content: a string is required");
    }
    return std::make_unique<ReplaceDecoder>(std::move(pattern), json["content"].get<std::string>());
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto steps, ParseSteps<Decoder>(json, "decoder", "decoders", DecoderFromJson));
    return std::make_unique<DecoderSequence>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("decoder type \"", type, "\" is not supported; supported: ",
                   absl::StrJoin({"ByteLevel", "WordPiece", "Metaspace", "ByteFallback", "Fuse",
                                  "Strip", "Replace", "Sequence"},
                                 ", ")));
}

}  // namespace attnserve
