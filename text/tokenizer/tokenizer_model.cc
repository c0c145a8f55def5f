#include "text/tokenizer/tokenizer_model.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/tokenizer/bpe.h"
#include "text/tokenizer/unigram.h"
#include "text/tokenizer/wordpiece.h"

namespace attnserve {

absl::StatusOr<Vocabulary> VocabularyFromJson(const nlohmann::json& model) {
  auto json = model.find("vocab");
  if (json == model.end() || !json->is_object()) {
    return absl::InvalidArgumentError("model.vocab: a {token: id} object is required");
  }
  Vocabulary vocab;
  vocab.ids.reserve(json->size());
  for (const auto& [token, id] : json->items()) {
    // Ids are 32-bit in the reference.
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (uint64_t{1} << 31)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.vocab[\"", token, "\"]: the id is not an integer in [0, 2^31)"));
    }
    vocab.ids[token] = id.get<int64_t>();
  }
  vocab.size = static_cast<int64_t>(vocab.ids.size());
  for (const auto& [token, id] : vocab.ids) vocab.AddToken(id, token);
  return vocab;
}

absl::StatusOr<std::unique_ptr<TokenizerModel>> TokenizerModelFromJson(const nlohmann::json& json) {
  if (!json.is_object()) return absl::InvalidArgumentError("model: an object is required");
  std::string type;
  if (auto it = json.find("type"); it != json.end() && it->is_string()) {
    type = it->get<std::string>();
  } else if (json.contains("merges")) {  // files written without the tag: told by their fields
    type = "BPE";
  } else if (json.contains("max_input_chars_per_word")) {
    type = "WordPiece";
  } else if (json.contains("vocab") && json["vocab"].is_array()) {
    type = "Unigram";
  }
  const auto upcast = [](auto model) -> absl::StatusOr<std::unique_ptr<TokenizerModel>> {
    ASSIGN_OR_RETURN(auto concrete, std::move(model));
    return std::unique_ptr<TokenizerModel>(std::move(concrete));
  };
  if (type == "BPE") return upcast(Bpe::FromJson(json));
  if (type == "WordPiece") return upcast(WordPiece::FromJson(json));
  if (type == "Unigram") return upcast(Unigram::FromJson(json));
  return absl::InvalidArgumentError(absl::StrCat(
      "model type \"", type, "\" is not supported; supported: BPE, WordPiece, Unigram"));
}

}  // namespace attnserve
