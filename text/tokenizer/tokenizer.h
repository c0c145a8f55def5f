// What the engine and the server need of a model's tokenizer, whichever it is: the byte
// tokenizer of the engine's own models, or a Hugging Face tokenizer.json.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/tokenizer/encoding.h"

namespace attnserve {

// How a text, or a pair of texts, is cut to fit a model's context, as the reference library's
// truncation cuts it (before the special tokens are added, which count).
struct Truncation {
  // Which text of a pair loses tokens: the longer one, until both fit or are equally long
  // (tokenizers' longest_first), only the first, or only the second (a reranker's document: the
  // query stays whole).
  enum class Strategy { kLongestFirst, kOnlyFirst, kOnlySecond };

  size_t max_tokens = 0;  // the most tokens of the result, special tokens included; 0: no limit
  Strategy strategy = Strategy::kLongestFirst;
  bool from_left = false;  // tokens go from the start of a text (TEI's truncation_direction)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encode with the special tokens, cut to `truncation`. An error names a text that cannot be
  // cut enough (a limit below the special tokens, only_second with a long first text).
  absl::StatusOr<Encoding> EncodeTruncated(const std::string& text,
                                           const Truncation& truncation) const;
  // A pair (query and document, two sentences), joined as the tokenizer's pair template joins
  // them ("[CLS] A [SEP] B [SEP]" with type ids 0 then 1, "<s> A </s></s> B </s>"), cut to
  // `truncation`. Offsets are in each token's own text.
  absl::StatusOr<Encoding> EncodePair(const std::string& first, const std::string& second,
                                      const Truncation& truncation = {}) const;

  // The tokens of `text` with their byte ranges in it; `add_special_tokens` adds what the
  // tokenizer puts around a sequence (BERT's [CLS] and [SEP], Llama's <s>). An error
  // (INVALID_ARGUMENT) names what cannot be encoded.
  virtual absl::StatusOr<Encoding> Encode(const std::string& text,
                                          bool add_special_tokens = true) const = 0;
  // Only the ids, for requests.
  virtual absl::StatusOr<std::vector<int64_t>> EncodeIds(const std::string& text) const {
    auto encoding = Encode(text);
    if (!encoding.ok()) return encoding.status();
    return std::move(encoding->ids);
  }
  // The text of `ids`, valid UTF-8 (bytes that do not form a character become U+FFFD). Ids the
  // tokenizer does not know are an error for the byte tokenizer and skipped by tokenizer.json's
  // (as its reference does: a model's vocabulary may be larger than its tokenizer's).
  virtual absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids,
                                             bool skip_special_tokens = false) const = 0;
  // How many of the last `ids` hold the bytes of a character that the next ids could complete
  // (a byte-level or byte-fallback token can be part of one), in the bytes they stand for before
  // invalid UTF-8 is replaced; 0 when the text ends on a whole character.
  virtual size_t IncompleteCharacterTokens(const std::vector<int64_t>& ids) const = 0;
  // One token on its own, valid UTF-8: its text, or where that is part of a character, its
  // spelling in the vocabulary ("<0xE6>", GPT-2's "Ġæ").
  virtual std::string TokenText(int64_t id) const = 0;

  // The bytes a token adds to the middle of a text, before they are read as UTF-8 (GPT-2's "Ġæ"
  // is " " and half of "æ", SentencePiece's "▁the" is " the"); nullopt for a special token,
  // which stands for no text, and for an unknown id. What constrained decoding matches.
  virtual std::optional<std::string> TokenBytes(int64_t id) const = 0;

  // "byte", or a tokenizer.json's model: "BPE", "WordPiece", "Unigram".
  virtual std::string type() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  virtual std::map<std::string, int64_t> special_tokens() const = 0;
  // A token's id by its text (special tokens included), or -1.
  virtual int64_t TokenToId(const std::string& token) const = 0;

 protected:
  // What EncodeTruncated and EncodePair build on: a text's tokens before post-processing, then
  // the special tokens (and offset trimming) of one sequence or a pair. The defaults add no
  // special tokens and give the second text of a pair type 1.
  virtual absl::StatusOr<Encoding> EncodeSequence(const std::string& text) const {
    return Encode(text, /*add_special_tokens=*/false);
  }
  virtual Encoding AddSpecialTokens(Encoding sequence, const std::string& /*text*/) const {
    return sequence;
  }
  virtual absl::StatusOr<Encoding> JoinPair(Encoding first, const std::string& first_text,
                                            Encoding second, const std::string& second_text) const;
  // How many special tokens one sequence (pair false) or a pair gets.
  virtual size_t AddedTokens(bool /*pair*/) const { return 0; }
};

}  // namespace attnserve
