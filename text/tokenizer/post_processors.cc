#include "text/tokenizer/post_processors.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/component_steps.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {
namespace {

struct SpecialPiece {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
};

// The single-sequence template: special pieces around the sequence, in order.
class TemplateProcessing final : public PostProcessor {
 public:
  // nullopt in `pieces` stands for the sequence.
  explicit TemplateProcessing(std::vector<std::optional<SpecialPiece>> pieces)
      : pieces_(std::move(pieces)) {
    // The usual template holds the sequence once: its specials then go around it in place.
    if (std::count(pieces_.begin(), pieces_.end(), std::nullopt) != 1) return;
    Encoding* side = &before_;
    for (const auto& piece : pieces_) {
      if (!piece) {
        side = &after_;
        continue;
      }
      for (size_t i = 0; i < piece->ids.size(); ++i) {
        side->Add(piece->ids[i], piece->tokens[i], {0, 0}, true);
      }
    }
    in_place_ = true;
  }

  Encoding Process(Encoding sequence, const std::string&, bool add_special_tokens) const override {
    if (!add_special_tokens) return sequence;
    if (in_place_) {
      Insert(before_, sequence, true);
      Insert(after_, sequence, false);
      return sequence;
    }
    Encoding out;
    for (const auto& piece : pieces_) {
      if (!piece) {
        for (size_t i = 0; i < sequence.ids.size(); ++i) {
          out.Add(sequence.ids[i], std::move(sequence.tokens[i]), sequence.offsets[i],
                  sequence.special[i] != 0);
        }
        continue;
      }
      for (size_t i = 0; i < piece->ids.size(); ++i) {
        out.Add(piece->ids[i], piece->tokens[i], {0, 0}, true);
      }
    }
    return out;
  }

 private:
  static void Insert(const Encoding& specials, Encoding& sequence, bool front) {
    const auto at = [&](auto& values) { return front ? values.begin() : values.end(); };
    sequence.ids.insert(at(sequence.ids), specials.ids.begin(), specials.ids.end());
    sequence.tokens.insert(at(sequence.tokens), specials.tokens.begin(), specials.tokens.end());
    sequence.offsets.insert(at(sequence.offsets), specials.offsets.begin(), specials.offsets.end());
    sequence.special.insert(at(sequence.special), specials.special.begin(), specials.special.end());
  }

  const std::vector<std::optional<SpecialPiece>> pieces_;
  bool in_place_ = false;
  Encoding before_, after_;  // the specials before and after the sequence, when in place
};

// Byte-level tokens' offsets without their leading and trailing spaces ('Ġ' or whitespace), as
// the reference's process_offsets does in chars: a single leading space of the first token is
// kept when it was added as a prefix.
void TrimOffsets(Encoding& encoding, const std::string& text, bool add_prefix_space) {
  const auto is_space = [](char32_t c) {
    return c == byte_level::ByteToChar(' ') || unicode::IsWhitespace(c);
  };
  for (size_t i = 0; i < encoding.ids.size(); ++i) {
    const std::vector<char32_t> chars = CodePoints(encoding.tokens[i]);
    size_t leading = 0, trailing = 0;
    while (leading < chars.size() && is_space(chars[leading])) ++leading;
    while (trailing < chars.size() && is_space(chars[chars.size() - 1 - trailing])) ++trailing;
    ByteRange& range = encoding.offsets[i];
    if (leading > 0) {
      if ((i == 0 || range.begin == 0) && add_prefix_space && leading == 1) leading = 0;
      for (; leading > 0 && range.begin < range.end; --leading) {
        range.begin += unicode::DecodeUtf8(std::string_view(text).substr(range.begin)).bytes;
      }
      range.begin = std::min(range.begin, range.end);
    }
    if (trailing > 0 && CodePoints(text.substr(0, range.end)).size() >= trailing) {
      for (; trailing > 0 && range.end > range.begin; --trailing) {
        do {
          --range.end;
        } while (range.end > range.begin && (static_cast<uint8_t>(text[range.end]) & 0xC0) == 0x80);
      }
    }
  }
}

class ByteLevelProcessing final : public PostProcessor {
 public:
  ByteLevelProcessing(bool trim_offsets, bool add_prefix_space)
      : trim_offsets_(trim_offsets), add_prefix_space_(add_prefix_space) {}
  Encoding Process(Encoding sequence, const std::string& text, bool) const override {
    if (trim_offsets_) TrimOffsets(sequence, text, add_prefix_space_);
    return sequence;
  }

 private:
  const bool trim_offsets_, add_prefix_space_;
};

// RoBERTa's: "<s> $A </s>" after trimming the offsets as ByteLevel does.
class RobertaProcessing final : public PostProcessor {
 public:
  RobertaProcessing(TemplateProcessing specials, bool trim_offsets, bool add_prefix_space)
      : specials_(std::move(specials)),
        trim_offsets_(trim_offsets),
        add_prefix_space_(add_prefix_space) {}
  Encoding Process(Encoding sequence, const std::string& text,
                   bool add_special_tokens) const override {
    if (trim_offsets_) TrimOffsets(sequence, text, add_prefix_space_);
    return specials_.Process(std::move(sequence), text, add_special_tokens);
  }

 private:
  const TemplateProcessing specials_;
  const bool trim_offsets_, add_prefix_space_;
};

class PostProcessorSequence final : public PostProcessor {
 public:
  explicit PostProcessorSequence(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  Encoding Process(Encoding sequence, const std::string& text,
                   bool add_special_tokens) const override {
    for (const auto& step : steps_) {
      sequence = step->Process(std::move(sequence), text, add_special_tokens);
    }
    return sequence;
  }

 private:
  const std::vector<std::unique_ptr<PostProcessor>> steps_;
};

absl::StatusOr<bool> RequiredFlag(const nlohmann::json& json, const char* name) {
  auto it = json.find(name);
  if (it == json.end() || !it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("post_processor.", name, ": a boolean is required"));
  }
  return it->get<bool>();
}

absl::StatusOr<SpecialPiece> PairPiece(const nlohmann::json& json, const char* name) {
  auto it = json.find(name);
  if (it == json.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_string() ||
      !(*it)[1].is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat("post_processor.", name, ": [token, id] is required"));
  }
  return SpecialPiece{{(*it)[1].get<int64_t>()}, {(*it)[0].get<std::string>()}};
}

absl::StatusOr<std::unique_ptr<PostProcessor>> TemplateFromJson(const nlohmann::json& json) {
  const auto single = json.find("single");
  const auto specials = json.find("special_tokens");
  if (single == json.end() || !single->is_array()) {
    return absl::InvalidArgumentError("post_processor.single: an array is required");
  }
  std::vector<std::optional<SpecialPiece>> pieces;
  for (size_t i = 0; i < single->size(); ++i) {
    const nlohmann::json& piece = (*single)[i];
    if (piece.contains("Sequence")) {
      pieces.push_back(std::nullopt);
      continue;
    }
    const std::string where = absl::StrCat("post_processor.single[", i, "]");
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id") ||
        !piece["SpecialToken"]["id"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a Sequence or a SpecialToken with an id is required"));
    }
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (specials == json.end() || !specials->is_object() || !specials->contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": special token \"", name, "\" is not in special_tokens"));
    }
    const nlohmann::json& special = (*specials)[name];
    if (!special.contains("ids") || !special.contains("tokens") || !special["ids"].is_array() ||
        !special["tokens"].is_array() || special["ids"].size() != special["tokens"].size()) {
      return absl::InvalidArgumentError(absl::StrCat("post_processor.special_tokens[\"", name,
                                                     "\"]: ids and tokens of one length"));
    }
    SpecialPiece special_piece;
    for (size_t k = 0; k < special["ids"].size(); ++k) {
      if (!special["ids"][k].is_number_unsigned() || !special["tokens"][k].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("post_processor.special_tokens[\"", name,
                                                       "\"]: ids are integers, tokens strings"));
      }
      special_piece.ids.push_back(special["ids"][k].get<int64_t>());
      special_piece.tokens.push_back(special["tokens"][k].get<std::string>());
    }
    pieces.push_back(std::move(special_piece));
  }
  return std::make_unique<TemplateProcessing>(std::move(pieces));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessorFromJson(const nlohmann::json& json) {
  if (json.is_null()) return std::unique_ptr<PostProcessor>();
  if (!json.is_object() || !json.contains("type") || !json["type"].is_string()) {
    return absl::InvalidArgumentError("post_processor: an object with a \"type\" is required");
  }
  const std::string type = json["type"].get<std::string>();
  if (type == "TemplateProcessing") return TemplateFromJson(json);
  if (type == "BertProcessing") {
    ASSIGN_OR_RETURN(SpecialPiece cls, PairPiece(json, "cls"));
    ASSIGN_OR_RETURN(SpecialPiece sep, PairPiece(json, "sep"));
    return std::make_unique<TemplateProcessing>(
        std::vector<std::optional<SpecialPiece>>{std::move(cls), std::nullopt, std::move(sep)});
  }
  if (type == "RobertaProcessing") {
    ASSIGN_OR_RETURN(SpecialPiece cls, PairPiece(json, "cls"));
    ASSIGN_OR_RETURN(SpecialPiece sep, PairPiece(json, "sep"));
    ASSIGN_OR_RETURN(const bool trim_offsets, RequiredFlag(json, "trim_offsets"));
    ASSIGN_OR_RETURN(const bool add_prefix_space, RequiredFlag(json, "add_prefix_space"));
    return std::make_unique<RobertaProcessing>(
        TemplateProcessing({std::move(cls), std::nullopt, std::move(sep)}), trim_offsets,
        add_prefix_space);
  }
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(const bool trim_offsets, RequiredFlag(json, "trim_offsets"));
    ASSIGN_OR_RETURN(const bool add_prefix_space, RequiredFlag(json, "add_prefix_space"));
    return std::make_unique<ByteLevelProcessing>(trim_offsets, add_prefix_space);
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto steps, ParseSteps<PostProcessor>(json, "post_processor", "processors",
                                                           PostProcessorFromJson));
    return std::make_unique<PostProcessorSequence>(std::move(steps));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "post_processor type \"", type, "\" is not supported; supported: ",
      absl::StrJoin(
          {"TemplateProcessing", "BertProcessing", "RobertaProcessing", "ByteLevel", "Sequence"},
          ", ")));
}

}  // namespace attnserve
