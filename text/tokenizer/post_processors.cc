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

// A piece of a template: special tokens, or the first (0) or second (1) sequence; with the type
// id its tokens get.
struct TemplatePiece {
  std::optional<SpecialPiece> special;
  int sequence = 0;
  uint8_t type_id = 0;
};
using Template = std::vector<TemplatePiece>;

size_t SpecialTokens(const Template& pieces) {
  size_t count = 0;
  for (const TemplatePiece& piece : pieces) count += piece.special ? piece.special->ids.size() : 0;
  return count;
}

// Special pieces around one sequence ("[CLS] $A [SEP]") or a pair ("[CLS] $A [SEP] $B:1 [SEP]:1").
class TemplateProcessing final : public PostProcessor {
 public:
  TemplateProcessing(Template single, Template pair)
      : single_(std::move(single)), pair_(std::move(pair)) {
    // The usual template holds the sequence once, all of type 0: its specials then go around it
    // in place.
    if (std::count_if(single_.begin(), single_.end(),
                      [](const TemplatePiece& piece) { return !piece.special; }) != 1) {
      return;
    }
    Encoding* side = &before_;
    for (const TemplatePiece& piece : single_) {
      if (piece.type_id != 0) return;
      if (!piece.special) {
        side = &after_;
        continue;
      }
      for (size_t i = 0; i < piece.special->ids.size(); ++i) {
        side->Add(piece.special->ids[i], piece.special->tokens[i], {0, 0}, true);
      }
    }
    in_place_ = true;
  }

  Encoding Process(Encoding sequence, const std::string&, bool add_special_tokens) const override {
    if (in_place_) {
      if (add_special_tokens) {
        Insert(before_, sequence, true);
        Insert(after_, sequence, false);
      }
      return sequence;
    }
    Encoding none;
    return Fill(single_, sequence, none, add_special_tokens);
  }

  absl::StatusOr<Encoding> ProcessPair(Encoding first, const std::string&, Encoding second,
                                       const std::string&, bool add_special_tokens) const override {
    if (pair_.empty()) {
      return absl::InvalidArgumentError(
          "the tokenizer's post_processor has no pair template: it does not encode pairs");
    }
    return Fill(pair_, first, second, add_special_tokens);
  }

  size_t AddedTokens(bool pair) const override { return SpecialTokens(pair ? pair_ : single_); }

 private:
  // The template's pieces in order, the sequences' tokens given the template's type ids; without
  // special tokens, only the sequences.
  static Encoding Fill(const Template& pieces, Encoding& first, Encoding& second,
                       bool add_special_tokens) {
    Encoding out;
    for (const TemplatePiece& piece : pieces) {
      if (!piece.special) {
        Encoding& sequence = piece.sequence == 0 ? first : second;
        for (size_t i = 0; i < sequence.size(); ++i) out.AddFrom(sequence, i, piece.type_id);
        continue;
      }
      if (!add_special_tokens) continue;
      for (size_t i = 0; i < piece.special->ids.size(); ++i) {
        out.Add(piece.special->ids[i], piece.special->tokens[i], {0, 0}, true, piece.type_id);
      }
    }
    return out;
  }

  static void Insert(const Encoding& specials, Encoding& sequence, bool front) {
    const auto at = [&](auto& values) { return front ? values.begin() : values.end(); };
    sequence.ids.insert(at(sequence.ids), specials.ids.begin(), specials.ids.end());
    sequence.tokens.insert(at(sequence.tokens), specials.tokens.begin(), specials.tokens.end());
    sequence.offsets.insert(at(sequence.offsets), specials.offsets.begin(), specials.offsets.end());
    sequence.special.insert(at(sequence.special), specials.special.begin(), specials.special.end());
    sequence.type_ids.insert(at(sequence.type_ids), specials.type_ids.begin(),
                             specials.type_ids.end());
  }

  const Template single_, pair_;
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
  absl::StatusOr<Encoding> ProcessPair(Encoding first, const std::string& first_text,
                                       Encoding second, const std::string& second_text,
                                       bool) const override {
    return JoinPair(Process(std::move(first), first_text, false),
                    Process(std::move(second), second_text, false), 1);
  }
  size_t AddedTokens(bool) const override { return 0; }
  bool JoinsPairs() const override { return false; }

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
  absl::StatusOr<Encoding> ProcessPair(Encoding first, const std::string& first_text,
                                       Encoding second, const std::string& second_text,
                                       bool add_special_tokens) const override {
    if (trim_offsets_) {
      TrimOffsets(first, first_text, add_prefix_space_);
      TrimOffsets(second, second_text, add_prefix_space_);
    }
    return specials_.ProcessPair(std::move(first), first_text, std::move(second), second_text,
                                 add_special_tokens);
  }
  size_t AddedTokens(bool pair) const override { return specials_.AddedTokens(pair); }

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
  // Steps that keep the two sequences apart (ByteLevel's trimming) run on each; the first that
  // joins them makes one sequence, which the steps after it process as one.
  absl::StatusOr<Encoding> ProcessPair(Encoding first, const std::string& first_text,
                                       Encoding second, const std::string& second_text,
                                       bool add_special_tokens) const override {
    std::optional<Encoding> joined;
    for (const auto& step : steps_) {
      if (joined) {
        joined = step->Process(*std::move(joined), first_text, add_special_tokens);
      } else if (step->JoinsPairs()) {
        ASSIGN_OR_RETURN(joined, step->ProcessPair(std::move(first), first_text, std::move(second),
                                                   second_text, add_special_tokens));
      } else {
        first = step->Process(std::move(first), first_text, add_special_tokens);
        second = step->Process(std::move(second), second_text, add_special_tokens);
      }
    }
    return joined ? *std::move(joined) : JoinPair(std::move(first), std::move(second), 1);
  }
  size_t AddedTokens(bool pair) const override {
    size_t count = 0;
    for (const auto& step : steps_) count += step->AddedTokens(pair);
    return count;
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

// One of TemplateProcessing's templates ("single" or "pair"); a missing pair template is empty.
absl::StatusOr<Template> TemplateOf(const nlohmann::json& json, const char* name) {
  const auto pieces_json = json.find(name);
  const auto specials = json.find("special_tokens");
  if (pieces_json == json.end() && std::string(name) == "pair") return Template();
  if (pieces_json == json.end() || !pieces_json->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("post_processor.", name, ": an array is required"));
  }
  Template pieces;
  for (size_t i = 0; i < pieces_json->size(); ++i) {
    const nlohmann::json& piece = (*pieces_json)[i];
    const std::string where = absl::StrCat("post_processor.", name, "[", i, "]");
    const bool is_sequence = piece.is_object() && piece.contains("Sequence");
    const nlohmann::json body =
        !piece.is_object()
            ? nlohmann::json()
            : piece.value(is_sequence ? "Sequence" : "SpecialToken", nlohmann::json());
    if (!body.is_object() || !body.contains("id") || !body["id"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a Sequence or a SpecialToken with an id is required"));
    }
    TemplatePiece out;
    if (const auto type_id = body.find("type_id"); type_id != body.end()) {
      if (!type_id->is_number_unsigned() || type_id->get<uint64_t>() > 255) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": type_id is not a small integer"));
      }
      out.type_id = static_cast<uint8_t>(type_id->get<uint64_t>());
    }
    const std::string id = body["id"].get<std::string>();
    if (is_sequence) {
      if (id != "A" && id != "B") {
        return absl::InvalidArgumentError(absl::StrCat(where, ": a Sequence is A or B"));
      }
      out.sequence = id == "A" ? 0 : 1;
      pieces.push_back(std::move(out));
      continue;
    }
    if (specials == json.end() || !specials->is_object() || !specials->contains(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": special token \"", id, "\" is not in special_tokens"));
    }
    const nlohmann::json& special = (*specials)[id];
    if (!special.contains("ids") || !special.contains("tokens") || !special["ids"].is_array() ||
        !special["tokens"].is_array() || special["ids"].size() != special["tokens"].size()) {
      return absl::InvalidArgumentError(absl::StrCat("post_processor.special_tokens[\"", id,
                                                     "\"]: ids and tokens of one length"));
    }
    SpecialPiece special_piece;
    for (size_t k = 0; k < special["ids"].size(); ++k) {
      if (!special["ids"][k].is_number_unsigned() || !special["tokens"][k].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("post_processor.special_tokens[\"", id,
                                                       "\"]: ids are integers, tokens strings"));
      }
      special_piece.ids.push_back(special["ids"][k].get<int64_t>());
      special_piece.tokens.push_back(special["tokens"][k].get<std::string>());
    }
    out.special = std::move(special_piece);
    pieces.push_back(std::move(out));
  }
  return pieces;
}

absl::StatusOr<std::unique_ptr<PostProcessor>> TemplateFromJson(const nlohmann::json& json) {
  ASSIGN_OR_RETURN(Template single, TemplateOf(json, "single"));
  ASSIGN_OR_RETURN(Template pair, TemplateOf(json, "pair"));
  return std::make_unique<TemplateProcessing>(std::move(single), std::move(pair));
}

// BERT's and RoBERTa's fixed templates: "cls A sep" and "cls A sep B sep" (type 1 from B on), or
// RoBERTa's "cls A sep sep B sep" (all type 0).
TemplateProcessing FixedTemplate(const SpecialPiece& cls, const SpecialPiece& sep, bool roberta) {
  const auto special = [](const SpecialPiece& piece, uint8_t type_id) {
    return TemplatePiece{piece, 0, type_id};
  };
  const uint8_t b_type = roberta ? 0 : 1;
  Template pair = {special(cls, 0), {std::nullopt, 0, 0}, special(sep, 0)};
  if (roberta) pair.push_back(special(sep, 0));
  pair.push_back({std::nullopt, 1, b_type});
  pair.push_back(special(sep, b_type));
  return TemplateProcessing({special(cls, 0), {std::nullopt, 0, 0}, special(sep, 0)},
                            std::move(pair));
}

}  // namespace

Encoding JoinPair(Encoding first, Encoding second, uint8_t second_type) {
  for (size_t i = 0; i < second.size(); ++i) first.AddFrom(second, i, second_type);
  return first;
}

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
    return std::make_unique<TemplateProcessing>(FixedTemplate(cls, sep, /*roberta=*/false));
  }
  if (type == "RobertaProcessing") {
    ASSIGN_OR_RETURN(SpecialPiece cls, PairPiece(json, "cls"));
    ASSIGN_OR_RETURN(SpecialPiece sep, PairPiece(json, "sep"));
    ASSIGN_OR_RETURN(const bool trim_offsets, RequiredFlag(json, "trim_offsets"));
    ASSIGN_OR_RETURN(const bool add_prefix_space, RequiredFlag(json, "add_prefix_space"));
    return std::make_unique<RobertaProcessing>(FixedTemplate(cls, sep, /*roberta=*/true),
                                               trim_offsets, add_prefix_space);
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
