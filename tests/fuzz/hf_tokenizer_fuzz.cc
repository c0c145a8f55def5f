// libFuzzer target: arbitrary bytes as text and as token ids through four tokenizer.json
// tokenizers, one of each kind served (byte-level BPE as GPT-2's, byte-fallback BPE as Llama 2's,
// WordPiece as BERT's, Unigram with byte fallback). Checks properties: text that is not UTF-8 is
// refused; every token's range lies inside the text; GPT-2's and Llama 2's round-trip text
// exactly; decoded text is valid UTF-8; streamed pieces are valid UTF-8 and add up to the
// decoded text (for arbitrary ids, with GPT-2's only; for text, except the Unigram's when the
// text spells a byte token); a pair of its halves and the text cut to limits keep within them
// (CheckPairsAndTruncation).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/byte_tokenizer.h"
#include "text/tokenizer/hf_tokenizer.h"
#include "text/tokenizer/text_stream.h"
#include "text/tokenizer/unicode.h"

namespace {

using nlohmann::json;

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "hf_tokenizer_fuzz: %s\n", what);
    std::abort();
  }
}

json Added(const std::string& content, int64_t id) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

json Gpt2Like() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[attnserve::byte_level::Encode(std::string(1, b))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"}, {"Ã", "©"}, {"ð", "Ł"}};
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    vocab[a + b] = static_cast<int64_t>(vocab.size());
    merge_list.push_back(a + " " + b);
  }
  const int64_t eot = static_cast<int64_t>(vocab.size());
  return {{"version", "1.0"},
          {"added_tokens", {Added("<|endoftext|>", eot)}},
          {"pre_tokenizer",
           {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"post_processor",
           {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

json ByteTokens(json vocab) {
  for (int b = 0; b < 256; ++b) {
    vocab[absl::StrFormat("<0x%02X>", b)] = static_cast<int64_t>(vocab.size());
  }
  return vocab;
}

json Llama2Like() {
  json vocab = ByteTokens({{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}});
  for (const char* piece : {"▁", "a", "b", "e", "▁a", "▁b", "ab", "▁ab"}) {
    vocab[piece] = static_cast<int64_t>(vocab.size());
  }
  return {{"version", "1.0"},
          {"added_tokens", {Added("<unk>", 0), Added("<s>", 1), Added("</s>", 2)}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "▁"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", json::array()},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"byte_fallback", true},
            {"fuse_unk", true},
            {"vocab", vocab},
            {"merges", {"▁ a", "▁ b", "a b", "▁a b"}}}}};
}

json BertLike() {
  json vocab = json::object();
  for (const char* piece : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "e", "h", "l", "o", "##a",
                            "##b", "##e", "##l", "##o", "he", "##llo", "!", "ä"}) {
    vocab[piece] = static_cast<int64_t>(vocab.size());
  }
  return {{"version", "1.0"},
          {"added_tokens", {Added("[UNK]", 1), Added("[CLS]", 2), Added("[SEP]", 3)}},
          {"normalizer",
           {{"type", "BertNormalizer"},
            {"clean_text", true},
            {"handle_chinese_chars", true},
            {"strip_accents", nullptr},
            {"lowercase", true}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor",
           {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}}},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", "[UNK]"},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 20},
            {"vocab", vocab}}}};
}

json UnigramLike() {
  json pieces = json::array();
  for (const auto& [piece, score] : std::vector<std::pair<std::string, double>>{{"<unk>", 0.0},
                                                                                {"▁", -2.0},
                                                                                {"a", -3.0},
                                                                                {"b", -3.0},
                                                                                {"ab", -4.0},
                                                                                {"▁a", -3.5},
                                                                                {"é", -5.0}}) {
    pieces.push_back(json::array({piece, score}));
  }
  for (int b = 0; b < 256; ++b) {
    pieces.push_back(json::array({absl::StrFormat("<0x%02X>", b), -20.0}));
  }
  return {
      {"version", "1.0"},
      {"pre_tokenizer",
       {{"type", "Metaspace"},
        {"replacement", "▁"},
        {"prepend_scheme", "always"},
        {"split", true}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Metaspace"},
           {"replacement", "▁"},
           {"prepend_scheme", "always"},
           {"split", true}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}}}}}},
      {"model", {{"type", "Unigram"}, {"unk_id", 0}, {"byte_fallback", true}, {"vocab", pieces}}}};
}

std::vector<std::unique_ptr<attnserve::HfTokenizer>>& Tokenizers() {
  static auto* tokenizers = [] {
    auto* list = new std::vector<std::unique_ptr<attnserve::HfTokenizer>>;
    for (const json& config : {Gpt2Like(), Llama2Like(), BertLike(), UnigramLike()}) {
      auto tokenizer = attnserve::HfTokenizer::FromJson(config.dump(), "fuzz.json");
      if (!tokenizer.ok()) std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
      Require(tokenizer.ok(), "a fuzzing tokenizer does not load");
      list->push_back(std::make_unique<attnserve::HfTokenizer>(*std::move(tokenizer)));
    }
    return list;
  }();
  return *tokenizers;
}

void CheckStream(const attnserve::HfTokenizer& tokenizer, const std::vector<int64_t>& ids,
                 bool exact) {
  attnserve::TextStream stream(tokenizer, {});
  std::string streamed;
  for (int64_t id : ids) {
    const std::string piece = stream.Push(id);
    Require(attnserve::unicode::IsValidUtf8(piece), "a streamed piece is invalid UTF-8");
    streamed += piece;
  }
  streamed += stream.Finish();
  Require(attnserve::unicode::IsValidUtf8(streamed), "the streamed text is invalid UTF-8");
  if (exact && streamed != *tokenizer.Decode(ids)) {
    std::fprintf(stderr, "streamed: %s\ndecoded:  %s\n", streamed.c_str(),
                 tokenizer.Decode(ids)->c_str());
    Require(false, "streamed pieces differ from the text");
  }
}

// The text split in two as a pair and cut to a few limits: within each limit, every token's
// range inside its own text, type ids 0 then 1 for BERT's template; a template without a pair
// (Llama 2's) refuses pairs.
void CheckPairsAndTruncation(const attnserve::HfTokenizer& tokenizer, const std::string& text,
                             size_t whole, bool no_pair_template) {
  size_t middle = text.size() / 2;
  while (middle > 0 && (static_cast<uint8_t>(text[middle]) & 0xC0) == 0x80) --middle;
  const std::string first = text.substr(0, middle), second = text.substr(middle);
  for (size_t max_tokens : {size_t{0}, size_t{4}, size_t{7}, whole / 2 + 3}) {
    for (auto strategy : {attnserve::Truncation::Strategy::kLongestFirst,
                          attnserve::Truncation::Strategy::kOnlyFirst,
                          attnserve::Truncation::Strategy::kOnlySecond}) {
      const attnserve::Truncation truncation{max_tokens, strategy, max_tokens % 2 == 1};
      const auto pair = tokenizer.EncodePair(first, second, truncation);
      if (no_pair_template) {
        Require(!pair.ok(), "a tokenizer without a pair template encoded a pair");
        continue;
      }
      if (!pair.ok()) continue;  // a limit too small for the specials or the kept text
      Require(max_tokens == 0 || pair->size() <= max_tokens, "a pair is longer than its limit");
      Require(pair->type_ids.size() == pair->size(), "a pair's type ids do not match its tokens");
      for (size_t i = 0; i < pair->size(); ++i) {
        Require(pair->offsets[i].end <= std::max(first.size(), second.size()),
                "a pair token's range is outside its text");
        Require(i == 0 || pair->type_ids[i] >= pair->type_ids[i - 1],
                "a pair's type ids go back from 1 to 0");
      }
    }
    const auto cut = tokenizer.EncodeTruncated(text, {max_tokens, {}, max_tokens % 2 == 0});
    if (cut.ok()) {
      Require(max_tokens == 0 || cut->size() <= max_tokens, "a cut text is longer than its limit");
      Require(max_tokens != 0 || cut->size() == whole, "an uncut text lost tokens");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data), size);
  const bool valid = attnserve::unicode::IsValidUtf8(raw);
  const std::string text = valid ? raw : attnserve::SanitizeUtf8(raw);
  const auto& tokenizers = Tokenizers();
  for (size_t k = 0; k < tokenizers.size(); ++k) {
    const attnserve::HfTokenizer& tokenizer = *tokenizers[k];
    if (!valid) Require(!tokenizer.Encode(raw).ok(), "text that is not UTF-8 was encoded");
    auto encoding = tokenizer.Encode(text);
    Require(encoding.ok(), "valid text was refused");
    for (const attnserve::ByteRange& range : encoding->offsets) {
      Require(range.begin <= range.end && range.end <= text.size(),
              "a token's range is outside the text");
    }
    const std::string decoded = *tokenizer.Decode(encoding->ids, /*skip_special_tokens=*/true);
    Require(attnserve::unicode::IsValidUtf8(decoded), "decoded text is invalid UTF-8");
    // Byte-level BPE loses nothing; Llama 2's loses only what its own symbols stand for.
    const bool plain = !absl::StrContains(text, "▁") && !absl::StrContains(text, "<s>") &&
                       !absl::StrContains(text, "</s>") && !absl::StrContains(text, "<unk>");
    if (k == 0) Require(*tokenizer.Decode(encoding->ids) == text, "GPT-2's did not round-trip");
    if (k == 1 && plain) Require(decoded == text, "Llama 2's did not round-trip");
    // A byte-fallback Unigram matches a byte token's spelling in the text ("<0x8D>" is that
    // byte, as in `tokenizers`): a stray byte makes ByteFallback replace its whole run, which a
    // stream cannot follow past its held tokens (text_stream.h).
    const bool unigram_reads_a_byte_token = k == 3 && absl::StrContains(text, "<0x");
    CheckStream(tokenizer, encoding->ids, /*exact=*/!unigram_reads_a_byte_token);

    CheckPairsAndTruncation(tokenizer, text, encoding->size(), k == 1);

    // The bytes as ids, two bytes each: any id sequence decodes and streams.
    std::vector<int64_t> ids;
    const int64_t vocab = tokenizer.vocab_size();
    for (size_t i = 0; i + 1 < size; i += 2) ids.push_back((data[i] | (data[i + 1] << 8)) % vocab);
    Require(attnserve::unicode::IsValidUtf8(*tokenizer.Decode(ids)), "ids decode to invalid UTF-8");
    // ByteLevel replaces invalid UTF-8 per character, so its stream is exact for any ids;
    // ByteFallback's whole-run replacement is not, past 16 held tokens (text_stream.h).
    CheckStream(tokenizer, ids, /*exact=*/k == 0);
  }
  return 0;
}
