#include "text/tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {
namespace {

constexpr char kMetaspace[] = "\xE2\x96\x81";  // "▁", SentencePiece's space

// llama.cpp's token types (tokenizer.ggml.token_type); 0 is "undefined", read as normal.
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The pre-tokenizers of the models' own tokenizer.json files, for the tokenizer.ggml.pre names
// that llama.cpp gives exactly their regexes.
enum class PreTokenizer { kGpt2, kDigitsGpt2, kLlama3, kQwen2 };
constexpr std::pair<absl::string_view, PreTokenizer> kPreTokenizers[] = {
    {"gpt-2", PreTokenizer::kGpt2},           {"smollm", PreTokenizer::kDigitsGpt2},
    {"starcoder", PreTokenizer::kDigitsGpt2}, {"llama3", PreTokenizer::kLlama3},
    {"llama-v3", PreTokenizer::kLlama3},      {"llama-bpe", PreTokenizer::kLlama3},
    {"qwen2", PreTokenizer::kQwen2},
};
constexpr char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Deriving merges looks up every split of every token: a bound on the bytes hashed, far above
// any real vocabulary's (a few million), so that a file of huge tokens is refused, not ground on.
constexpr uint64_t kMaxMergeSearchBytes = uint64_t{1} << 30;

// The metadata's values, type-checked; errors name the file and the key.
class Metadata {
 public:
  Metadata(const nlohmann::json& json, const std::string& path) : json_(json), path_(path) {}

  absl::Status Error(absl::string_view key, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", key, ": ", message));
  }
  // An array's element: "key[index]: message".
  absl::Status Error(absl::string_view key, size_t index, absl::string_view message) const {
    return Error(absl::StrCat(key, "[", index, "]"), message);
  }

  const nlohmann::json* Find(const std::string& key) const {
    if (!json_.is_object()) return nullptr;
    auto it = json_.find(key);
    return it == json_.end() ? nullptr : &*it;
  }

  absl::StatusOr<std::optional<std::string>> String(const std::string& key) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string()) return Error(key, "a string is required");
    return value->get_ref<const std::string&>();
  }

  absl::StatusOr<std::optional<bool>> Bool(const std::string& key) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_boolean()) return Error(key, "a boolean is required");
    return value->get<bool>();
  }

  // A token id, which must be in [0, vocab_size).
  absl::StatusOr<std::optional<int64_t>> Id(const std::string& key, int64_t vocab_size) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number_integer()) return Error(key, "an integer token id is required");
    const bool in_range = value->is_number_unsigned()
                              ? value->get<uint64_t>() < static_cast<uint64_t>(vocab_size)
                              : value->get<int64_t>() >= 0 && value->get<int64_t>() < vocab_size;
    if (!in_range) {
      return Error(key,
                   absl::StrCat("the id is outside the vocabulary of ", vocab_size, " tokens"));
    }
    return value->get<int64_t>();
  }

  // An array; of `size` elements unless size < 0. Absent and not required: nullptr.
  absl::StatusOr<const nlohmann::json*> Array(const std::string& key, bool required,
                                              int64_t size = -1) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr) {
      if (required) return Error(key, "is missing");
      return nullptr;
    }
    if (!value->is_array()) return Error(key, "an array is required");
    if (size >= 0 && value->size() != static_cast<size_t>(size)) {
      return Error(key, absl::StrCat("has ", value->size(),
                                     " elements where tokenizer.ggml.tokens "
                                     "has ",
                                     size));
    }
    return value;
  }

 private:
  const nlohmann::json& json_;
  const std::string& path_;
};

void AppendJsonString(absl::string_view text, std::string& out) {
  out += '"';
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  out += '"';
}

// Only valid UTF-8 gets here, so dumping cannot fail.
std::string Dump(const nlohmann::json& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The vocabulary: tokens by id, ids by token, types by id.
struct Vocabulary {
  std::vector<std::string> tokens;
  absl::flat_hash_map<absl::string_view, int32_t> ids;  // views of `tokens`
  std::vector<int64_t> types;

  int32_t Id(absl::string_view token) const {
    auto it = ids.find(token);
    return it == ids.end() ? -1 : it->second;
  }
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

absl::StatusOr<Vocabulary> ReadVocabulary(const Metadata& metadata) {
  const std::string key = "tokenizer.ggml.tokens";
  ASSIGN_OR_RETURN(const nlohmann::json* tokens, metadata.Array(key, /*required=*/true));
  if (tokens->empty()) return metadata.Error(key, "the vocabulary is empty");
  // Ids are 32-bit in the reference (and in llama.cpp).
  if (tokens->size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return metadata.Error(key, "more than 2^31 - 1 tokens");
  }
  Vocabulary vocab;
  vocab.tokens.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const nlohmann::json& token = (*tokens)[i];
    if (!token.is_string()) return metadata.Error(key, i, "not a string");
    const std::string& text = token.get_ref<const std::string&>();
    // tokenizer.json is UTF-8 text, so a token that is not cannot be written into it.
    if (!unicode::IsValidUtf8(text)) {
      return metadata.Error(key, i, "not valid UTF-8");
    }
    // llama.cpp names an empty token so; an empty one would match nothing anyway.
    vocab.tokens.push_back(text.empty() ? absl::StrCat("[EMPTY_", i, "]") : text);
  }
  vocab.ids.reserve(vocab.tokens.size());
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    auto [it, inserted] = vocab.ids.emplace(vocab.tokens[i], static_cast<int32_t>(i));
    if (!inserted) {
      return metadata.Error(key, i,
                            absl::StrCat("the same token as [", it->second, "] (a duplicate)"));
    }
  }

  const std::string types_key = "tokenizer.ggml.token_type";
  ASSIGN_OR_RETURN(const nlohmann::json* types,
                   metadata.Array(types_key, /*required=*/false, vocab.size()));
  vocab.types.assign(vocab.tokens.size(), kNormal);
  if (types != nullptr) {
    for (size_t i = 0; i < types->size(); ++i) {
      const nlohmann::json& type = (*types)[i];
      if (!type.is_number_integer() || type.get<int64_t>() < 0 || type.get<int64_t>() > kByte) {
        return metadata.Error(types_key, i, "not a token type (0 to 6)");
      }
      vocab.types[i] = type.get<int64_t>();
    }
  }
  return vocab;
}

// The merges of a "gpt2" vocabulary as [left, right] ids, in rank order. A pair listed twice
// keeps its first rank, as llama.cpp keeps it.
absl::StatusOr<std::vector<std::pair<int32_t, int32_t>>> ReadMerges(const Metadata& metadata,
                                                                    const Vocabulary& vocab) {
  const std::string key = "tokenizer.ggml.merges";
  ASSIGN_OR_RETURN(const nlohmann::json* merges, metadata.Array(key, /*required=*/true));
  std::vector<std::pair<int32_t, int32_t>> pairs;
  pairs.reserve(merges->size());
  absl::flat_hash_map<uint64_t, size_t> seen;
  seen.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const nlohmann::json& merge = (*merges)[i];
    if (!merge.is_string()) return metadata.Error(key, i, "not a string");
    const absl::string_view text = merge.get_ref<const std::string&>();
    // A left part may itself be a space (byte-level tokens spell it "Ġ", but not every file).
    const size_t space = text.size() > 1 ? text.find(' ', 1) : absl::string_view::npos;
    if (space == absl::string_view::npos) {
      return metadata.Error(key, i, "\"left right\" is required");
    }
    const absl::string_view left = text.substr(0, space), right = text.substr(space + 1);
    const int32_t left_id = vocab.Id(left), right_id = vocab.Id(right);
    if (left_id < 0 || right_id < 0) {
      return metadata.Error(
          key, i, absl::StrCat("its ", left_id < 0 ? "left" : "right", " part is not a token"));
    }
    if (vocab.Id(absl::StrCat(left, right)) < 0) {
      return metadata.Error(key, i, "the merged token is not a token");
    }
    const uint64_t pair =
        (uint64_t{static_cast<uint32_t>(left_id)} << 32) | static_cast<uint32_t>(right_id);
    if (seen.emplace(pair, i).second) pairs.emplace_back(left_id, right_id);
  }
  return pairs;
}

// The merges of a "llama" (SentencePiece) vocabulary, which the file does not list: every split
// of a token into two tokens, ranked as transformers' SentencePiece conversion ranks them, so
// that the result is the tokenizer.json that conversion writes.
absl::StatusOr<std::vector<std::pair<int32_t, int32_t>>> DeriveMerges(const Metadata& metadata,
                                                                      const Vocabulary& vocab) {
  const std::string key = "tokenizer.ggml.scores";
  ASSIGN_OR_RETURN(const nlohmann::json* scores_json,
                   metadata.Array(key, /*required=*/true, vocab.size()));
  std::vector<double> scores(vocab.tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    const nlohmann::json& score = (*scores_json)[i];
    // NaN would make the order below no order at all.
    if (!score.is_number() || !std::isfinite(score.get<double>())) {
      return metadata.Error(key, i, "not a finite number");
    }
    scores[i] = score.get<double>();
  }
  struct Merge {
    int32_t token, left, right;
    int32_t left_chars, right_chars;
  };
  std::vector<Merge> merges;
  uint64_t searched = 0;
  for (int32_t t = 0; t < static_cast<int32_t>(vocab.tokens.size()); ++t) {
    const absl::string_view token = vocab.tokens[t];
    std::vector<size_t> boundaries;  // byte offsets of the chars after the first
    for (size_t at = 0; at < token.size();) {
      at += unicode::DecodeUtf8(std::string_view(token.data() + at, token.size() - at)).bytes;
      if (at < token.size()) boundaries.push_back(at);
    }
    const int32_t chars = static_cast<int32_t>(boundaries.size()) + 1;
    for (size_t k = 0; k < boundaries.size(); ++k) {
      searched += token.size();
      if (searched > kMaxMergeSearchBytes) {
        return metadata.Error("tokenizer.ggml.tokens",
                              "the tokens are too long to derive merges from");
      }
      const int32_t left = vocab.Id(token.substr(0, boundaries[k]));
      if (left < 0) continue;
      const int32_t right = vocab.Id(token.substr(boundaries[k]));
      if (right < 0) continue;
      const int32_t left_chars = static_cast<int32_t>(k) + 1;
      merges.push_back({t, left, right, left_chars, chars - left_chars});
    }
  }
  // The merged token's score first (a higher one merges earlier), then longer left parts, then
  // longer right parts, then the vocabulary's order: transformers sorts on (score, left length,
  // right length) in reverse, stably, over the tokens in id order.
  std::sort(merges.begin(), merges.end(), [&scores](const Merge& a, const Merge& b) {
    if (scores[a.token] != scores[b.token]) return scores[a.token] > scores[b.token];
    if (a.left_chars != b.left_chars) return a.left_chars > b.left_chars;
    if (a.right_chars != b.right_chars) return a.right_chars > b.right_chars;
    return a.token < b.token;
  });
  std::vector<std::pair<int32_t, int32_t>> pairs;
  pairs.reserve(merges.size());
  for (const Merge& merge : merges) pairs.emplace_back(merge.left, merge.right);
  return pairs;
}

nlohmann::json ByteLevel(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", use_regex}};
}

nlohmann::json SplitIsolated(const char* regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

nlohmann::json PreTokenizerJson(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kGpt2:
      return ByteLevel(false, true, true);
    case PreTokenizer::kDigitsGpt2:
      return {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Digits"}, {"individual_digits", true}}, ByteLevel(false, true, true)}}};
    case PreTokenizer::kLlama3:
      return {{"type", "Sequence"},
              {"pretokenizers", {SplitIsolated(kLlama3Regex), ByteLevel(false, true, false)}}};
    case PreTokenizer::kQwen2:
      return {{"type", "Sequence"},
              {"pretokenizers", {SplitIsolated(kQwen2Regex), ByteLevel(false, false, false)}}};
  }
  return nullptr;
}

// "BOS $A EOS" and "BOS $A EOS BOS $B EOS", each special token where it is added; null when none.
nlohmann::json Template(const Vocabulary& vocab, std::optional<int64_t> bos,
                        std::optional<int64_t> eos) {
  if (!bos && !eos) return nullptr;
  nlohmann::json single = nlohmann::json::array(), pair = nlohmann::json::array();
  nlohmann::json specials = nlohmann::json::object();
  const auto special = [&](int64_t id, int type_id) {
    const std::string& token = vocab.tokens[id];
    specials[token] = {{"id", token}, {"ids", {id}}, {"tokens", {token}}};
    return nlohmann::json{{"SpecialToken", {{"id", token}, {"type_id", type_id}}}};
  };
  // The pair is the single sequence (type 0) followed by the second one (type 1).
  for (int type_id : {0, 1}) {
    nlohmann::json& pieces = type_id == 0 ? single : pair;
    if (type_id == 1) pieces = single;
    if (bos) pieces.push_back(special(*bos, type_id));
    pieces.push_back({{"Sequence", {{"id", type_id == 0 ? "A" : "B"}, {"type_id", type_id}}}});
    if (eos) pieces.push_back(special(*eos, type_id));
  }
  return {{"type", "TemplateProcessing"},
          {"single", std::move(single)},
          {"pair", std::move(pair)},
          {"special_tokens", std::move(specials)}};
}

}  // namespace

absl::StatusOr<std::string> TokenizerJsonFromGguf(const nlohmann::json& metadata_json,
                                                  const std::string& path) {
  if (!metadata_json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the metadata is not an object"));
  }
  const Metadata metadata(metadata_json, path);
  ASSIGN_OR_RETURN(std::optional<std::string> model, metadata.String("tokenizer.ggml.model"));
  if (!model) return metadata.Error("tokenizer.ggml.model", "is missing");
  const bool llama = *model == "llama";
  if (!llama && *model != "gpt2") {
    return metadata.Error("tokenizer.ggml.model",
                          absl::StrCat("\"", *model,
                                       "\" is not supported; supported: \"gpt2\" (byte-level BPE), "
                                       "\"llama\" (SentencePiece BPE)"));
  }

  PreTokenizer pre = PreTokenizer::kGpt2;
  if (!llama) {
    // llama.cpp falls back to a regex of its own when the name is missing, which no
    // tokenizer.json has.
    ASSIGN_OR_RETURN(std::optional<std::string> name, metadata.String("tokenizer.ggml.pre"));
    const auto found =
        std::find_if(std::begin(kPreTokenizers), std::end(kPreTokenizers),
                     [&name](const auto& entry) { return name && entry.first == *name; });
    if (found == std::end(kPreTokenizers)) {
      std::vector<absl::string_view> supported;
      for (const auto& entry : kPreTokenizers) supported.push_back(entry.first);
      return metadata.Error(
          "tokenizer.ggml.pre",
          absl::StrCat(name ? absl::StrCat("\"", *name, "\" is not supported") : "is missing",
                       "; supported for gpt2 vocabularies: ", absl::StrJoin(supported, ", ")));
    }
    pre = found->second;
  }

  ASSIGN_OR_RETURN(Vocabulary vocab, ReadVocabulary(metadata));
  ASSIGN_OR_RETURN(std::optional<int64_t> bos,
                   metadata.Id("tokenizer.ggml.bos_token_id", vocab.size()));
  ASSIGN_OR_RETURN(std::optional<int64_t> eos,
                   metadata.Id("tokenizer.ggml.eos_token_id", vocab.size()));
  ASSIGN_OR_RETURN(std::optional<int64_t> unk,
                   metadata.Id("tokenizer.ggml.unknown_token_id", vocab.size()));
  // Checked, not used: the tokenizer does not pad.
  RETURN_IF_ERROR(metadata.Id("tokenizer.ggml.padding_token_id", vocab.size()).status());
  if (llama) {
    // llama.cpp's defaults for SentencePiece vocabularies, where the vocabulary has them.
    if (!unk) unk = 0;
    if (!bos && vocab.size() > 1) bos = 1;
    if (!eos && vocab.size() > 2) eos = 2;
  }

  ASSIGN_OR_RETURN(std::optional<bool> add_bos_key, metadata.Bool("tokenizer.ggml.add_bos_token"));
  ASSIGN_OR_RETURN(std::optional<bool> add_eos_key, metadata.Bool("tokenizer.ggml.add_eos_token"));
  const bool add_bos = add_bos_key.value_or(llama || pre == PreTokenizer::kLlama3);
  const bool add_eos = add_eos_key.value_or(false);
  if (add_bos && !bos) {
    return metadata.Error("tokenizer.ggml.add_bos_token",
                          "BOS is added but tokenizer.ggml.bos_token_id is missing");
  }
  if (add_eos && !eos) {
    return metadata.Error("tokenizer.ggml.add_eos_token",
                          "EOS is added but tokenizer.ggml.eos_token_id is missing");
  }

  std::vector<std::pair<int32_t, int32_t>> merges;
  if (llama) {
    ASSIGN_OR_RETURN(merges, DeriveMerges(metadata, vocab));
  } else {
    ASSIGN_OR_RETURN(merges, ReadMerges(metadata, vocab));
  }

  nlohmann::json normalizer, pre_tokenizer, post_processor, decoder;
  nlohmann::json processor =
      Template(vocab, add_bos ? bos : std::nullopt, add_eos ? eos : std::nullopt);
  if (llama) {
    ASSIGN_OR_RETURN(std::optional<bool> prefix_key,
                     metadata.Bool("tokenizer.ggml.add_space_prefix"));
    const bool add_space_prefix = prefix_key.value_or(true);
    const nlohmann::json replace = {
        {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}};
    normalizer = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array()}};
    if (add_space_prefix) {
      normalizer["normalizers"].push_back({{"type", "Prepend"}, {"prepend", kMetaspace}});
    }
    normalizer["normalizers"].push_back(replace);
    decoder = {{"type", "Sequence"},
               {"decoders",
                {{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
                 {{"type", "ByteFallback"}},
                 {{"type", "Fuse"}}}}};
    if (add_space_prefix) {
      decoder["decoders"].push_back(
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    post_processor = std::move(processor);
  } else {
    if (pre == PreTokenizer::kQwen2) normalizer = {{"type", "NFC"}};
    pre_tokenizer = PreTokenizerJson(pre);
    // ByteLevel's post-processor, untrimmed, changes nothing; it is there as the models' own
    // tokenizer.json files have it.
    post_processor = ByteLevel(true, false, true);
    if (!processor.is_null()) {
      post_processor = {{"type", "Sequence"},
                        {"processors", {std::move(post_processor), std::move(processor)}}};
    }
    decoder = ByteLevel(true, true, true);
  }

  std::string out = R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[)";
  bool first = true;
  for (int64_t id = 0; id < vocab.size(); ++id) {
    const int64_t type = vocab.types[id];
    if (type != kControl && type != kUnknown && type != kUserDefined) continue;
    if (!first) out += ',';
    first = false;
    absl::StrAppend(&out, R"({"id":)", id, R"(,"content":)");
    AppendJsonString(vocab.tokens[id], out);
    absl::StrAppend(&out, R"(,"single_word":false,"lstrip":false,"rstrip":false,)",
                    R"("normalized":false,"special":)", type == kUserDefined ? "false" : "true",
                    "}");
  }
  absl::StrAppend(&out, R"(],"normalizer":)", Dump(normalizer), R"(,"pre_tokenizer":)",
                  Dump(pre_tokenizer), R"(,"post_processor":)", Dump(post_processor),
                  R"(,"decoder":)", Dump(decoder));
  absl::StrAppend(&out, R"(,"model":{"type":"BPE","dropout":null,"unk_token":)");
  if (llama && unk) {
    AppendJsonString(vocab.tokens[*unk], out);
  } else {
    out += "null";
  }
  absl::StrAppend(&out, R"(,"continuing_subword_prefix":null,"end_of_word_suffix":null,)",
                  R"("fuse_unk":)", llama ? "true" : "false", R"(,"byte_fallback":)",
                  llama ? "true" : "false", R"(,"ignore_merges":)",
                  pre == PreTokenizer::kLlama3 && !llama ? "true" : "false", R"(,"vocab":{)");
  for (int64_t id = 0; id < vocab.size(); ++id) {
    if (id > 0) out += ',';
    AppendJsonString(vocab.tokens[id], out);
    absl::StrAppend(&out, ":", id);
  }
  out += R"(},"merges":[)";
  for (size_t i = 0; i < merges.size(); ++i) {
    if (i > 0) out += ',';
    out += '[';
    AppendJsonString(vocab.tokens[merges[i].first], out);
    out += ',';
    AppendJsonString(vocab.tokens[merges[i].second], out);
    out += ']';
  }
  out += "]}}";
  return out;
}

}  // namespace attnserve
