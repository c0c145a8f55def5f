#include "text/tokenizer/hf_tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "text/tokenizer/reference_json.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {

absl::StatusOr<HfTokenizer> HfTokenizer::FromFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream text;
  text << file.rdbuf();
  return FromJson(text.str(), path);
}

absl::StatusOr<HfTokenizer> HfTokenizer::FromJson(const std::string& text,
                                                  const std::string& path) {
  const auto fail = [&path](const absl::Status& status) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", status.message()));
  };
  absl::StatusOr<nlohmann::json> parsed = ParseReferenceJson(text);
  if (!parsed.ok()) return fail(parsed.status());
  const nlohmann::json& json = *parsed;
  if (!json.is_object()) return fail(absl::InvalidArgumentError("not a JSON object"));
  const auto part = [&json](const char* name) {
    auto it = json.find(name);
    return it == json.end() ? nlohmann::json() : *it;
  };
  HfTokenizer tokenizer;
  if (auto version = json.find("version");
      version != json.end() && !(version->is_string() && *version == "1.0")) {
    return fail(absl::InvalidArgumentError("version: \"1.0\" is the only version supported"));
  }
  auto model = TokenizerModelFromJson(part("model"));
  if (!model.ok()) return fail(model.status());
  tokenizer.model_ = *std::move(model);
  auto normalizer = NormalizerFromJson(part("normalizer"));
  if (!normalizer.ok()) return fail(normalizer.status());
  tokenizer.normalizer_ = *std::move(normalizer);
  auto pre_tokenizer = PreTokenizerFromJson(part("pre_tokenizer"));
  if (!pre_tokenizer.ok()) return fail(pre_tokenizer.status());
  tokenizer.pre_tokenizer_ = *std::move(pre_tokenizer);
  auto post_processor = PostProcessorFromJson(part("post_processor"));
  if (!post_processor.ok()) return fail(post_processor.status());
  tokenizer.post_processor_ = *std::move(post_processor);
  auto decoder = DecoderFromJson(part("decoder"));
  if (!decoder.ok()) return fail(decoder.status());
  tokenizer.decoder_ = *std::move(decoder);
  const Vocabulary& vocab = tokenizer.model_->vocab();
  auto added = AddedVocabulary::FromJson(
      part("added_tokens"), [&vocab](const std::string& content) { return vocab.Id(content); },
      vocab.size,
      [&tokenizer](const std::string& content) {
        NormalizedText text(content);
        if (tokenizer.normalizer_) tokenizer.normalizer_->Apply(text);
        return text.normalized();
      });
  if (!added.ok()) return fail(added.status());
  tokenizer.added_ = *std::move(added);
  return tokenizer;
}

absl::StatusOr<Encoding> HfTokenizer::Encode(const std::string& text,
                                             bool add_special_tokens) const {
  ASSIGN_OR_RETURN(Encoding encoding, EncodeSequence(text));
  if (post_processor_) {
    return post_processor_->Process(std::move(encoding), text, add_special_tokens);
  }
  return encoding;
}

absl::StatusOr<Encoding> HfTokenizer::EncodeSequence(const std::string& text) const {
  // The gRPC API only carries valid UTF-8; anything else has no characters to tokenize.
  if (!unicode::IsValidUtf8(text)) {
    return absl::InvalidArgumentError("the text is not valid UTF-8");
  }
  // Added tokens that match the raw text, then, in each part between them, normalization and the
  // added tokens that match the normalized text.
  const NormalizedText whole(text);
  std::vector<TextSplit> splits;
  const auto split_added = [this](const NormalizedText& part, bool normalized,
                                  std::vector<TextSplit>& out) {
    for (const AddedVocabulary::Match& match : added_.Find(part.normalized(), normalized)) {
      std::optional<NormalizedText> piece = part.Slice(match.range);
      if (!piece) continue;
      if (match.token < 0) {
        out.push_back({*std::move(piece), std::nullopt});
      } else {
        const AddedToken& token = added_.tokens()[match.token];
        ModelToken added{token.id, piece->normalized(), {0, piece->normalized().size()}};
        out.push_back({*std::move(piece), added});
      }
    }
  };
  std::vector<TextSplit> raw;
  split_added(whole, false, raw);
  for (TextSplit& split : raw) {
    if (split.added) {
      splits.push_back(std::move(split));
      continue;
    }
    if (normalizer_) normalizer_->Apply(split.text);
    split_added(split.text, true, splits);
  }
  if (pre_tokenizer_) pre_tokenizer_->Apply(splits);

  Encoding encoding;
  for (const TextSplit& split : splits) {
    ASSIGN_OR_RETURN(const std::vector<ModelToken> tokens,
                     split.added ? std::vector<ModelToken>{*split.added}
                                 : model_->Tokenize(split.text.normalized()));
    for (const ModelToken& token : tokens) {
      ByteRange offsets = token.range;
      if (auto original = split.text.ToOriginal(token.range)) {
        offsets = {original->begin + split.text.original_shift(),
                   original->end + split.text.original_shift()};
      }
      // Where the reference keeps a range it could not map (REFERENCE.md §1), it may lie past
      // the text's end; clients slice the text with it.
      offsets.end = std::min(offsets.end, text.size());
      offsets.begin = std::min(offsets.begin, offsets.end);
      encoding.Add(token.id, token.value, offsets, false);
    }
  }
  return encoding;
}

Encoding HfTokenizer::AddSpecialTokens(Encoding sequence, const std::string& text) const {
  if (!post_processor_) return sequence;
  return post_processor_->Process(std::move(sequence), text, /*add_special_tokens=*/true);
}

absl::StatusOr<Encoding> HfTokenizer::JoinPair(Encoding first, const std::string& first_text,
                                               Encoding second,
                                               const std::string& second_text) const {
  if (!post_processor_) return attnserve::JoinPair(std::move(first), std::move(second), 1);
  return post_processor_->ProcessPair(std::move(first), first_text, std::move(second), second_text,
                                      /*add_special_tokens=*/true);
}

size_t HfTokenizer::AddedTokens(bool pair) const {
  return post_processor_ ? post_processor_->AddedTokens(pair) : 0;
}

std::string HfTokenizer::IdToToken(int64_t id) const {
  if (const AddedToken* added = added_.ById(id)) return added->content;
  const std::string* token = model_->vocab().Token(id);
  return token ? *token : "";
}

int64_t HfTokenizer::TokenToId(const std::string& token) const {
  for (const AddedToken& added : added_.tokens()) {
    if (added.content == token) return added.id;
  }
  return model_->vocab().Id(token);
}

int64_t HfTokenizer::vocab_size() const {
  int64_t size = model_->vocab().end_id;
  for (const AddedToken& token : added_.tokens()) size = std::max(size, token.id + 1);
  return size;
}

absl::StatusOr<std::string> HfTokenizer::Decode(const std::vector<int64_t>& ids,
                                                bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    std::string token = IdToToken(id);
    if (token.empty()) continue;
    if (skip_special_tokens && added_.IsSpecial(token)) continue;
    tokens.push_back(std::move(token));
  }
  if (!decoder_) return absl::StrJoin(tokens, " ");
  return absl::StrJoin(decoder_->DecodeChain(std::move(tokens)), "");
}

}  // namespace attnserve

namespace attnserve {

size_t HfTokenizer::IncompleteCharacterTokens(const std::vector<int64_t>& ids) const {
  if (!decoder_) return 0;
  // The bytes of the last tokens that stand for bytes, and where each token's begin.
  std::string tail;
  std::vector<size_t> token_sizes;  // from the last token back; unknown ids (skipped) are empty
  for (auto id = ids.rbegin(); id != ids.rend() && tail.size() < 4; ++id) {
    const std::string token = IdToToken(*id);
    std::optional<std::string> bytes;
    if (!token.empty()) {
      bytes = decoder_->TokenBytes(token);
      if (!bytes) break;
    }
    tail.insert(0, bytes.value_or(""));
    token_sizes.push_back(bytes ? bytes->size() : 0);
  }
  const size_t incomplete = unicode::IncompleteCharacterBytes(tail);
  // The tokens back to the one the incomplete character begins in.
  size_t tokens = 0;
  for (size_t covered = 0; covered < incomplete; ++tokens) covered += token_sizes[tokens];
  return tokens;
}

std::string HfTokenizer::TokenText(int64_t id) const {
  const std::string token = IdToToken(id);
  if (token.empty()) return absl::StrCat("<", id, ">");
  // Alone, a byte-level or byte-fallback token may be part of a character: its spelling then.
  std::string text = *Decode({id});
  const char* replacement = "\xEF\xBF\xBD";
  if (absl::StrContains(text, replacement) && !absl::StrContains(token, replacement)) return token;
  return text;
}

std::optional<std::string> HfTokenizer::TokenBytes(int64_t id) const {
  const std::string token = IdToToken(id);
  if (token.empty() || added_.IsSpecial(token)) return std::nullopt;
  if (decoder_) {
    if (auto bytes = decoder_->TokenBytes(token)) return bytes;
  }
  // A token that stands for text: what it adds after a copy of itself, since decoders treat the
  // first token of a text apart (SentencePiece's leading space stripped, WordPiece's "##").
  const std::string alone = *Decode({id});
  const std::string twice = *Decode({id, id});
  return twice.starts_with(alone) ? twice.substr(alone.size()) : alone;
}

std::map<std::string, int64_t> HfTokenizer::special_tokens() const {
  std::map<std::string, int64_t> specials;
  for (const AddedToken& token : added_.tokens()) {
    if (token.special) specials[token.content] = token.id;
  }
  return specials;
}

}  // namespace attnserve
