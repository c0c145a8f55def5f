#include "engine/tokenizer/post_processors.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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
      : pieces_(std::move(pieces)) {}

  Encoding Process(Encoding sequence, bool add_special_tokens) const override {
    if (!add_special_tokens) return sequence;
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
  const std::vector<std::optional<SpecialPiece>> pieces_;
};

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
    auto cls = PairPiece(json, "cls");
    auto sep = PairPiece(json, "sep");
    if (!cls.ok()) return cls.status();
    if (!sep.ok()) return sep.status();
    return std::make_unique<TemplateProcessing>(
        std::vector<std::optional<SpecialPiece>>{*cls, std::nullopt, *sep});
  }
  return absl::InvalidArgumentError(
      absl::StrCat("post_processor type \"", type, "\" is not supported; supported: ",
                   absl::StrJoin({"TemplateProcessing", "BertProcessing"}, ", ")));
}

}  // namespace attnserve
