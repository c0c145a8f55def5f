// A Hugging Face tokenizer.json: added tokens, normalizer, pre-tokenizer, model, post-processor
// and decoder, run as the reference library runs them (REFERENCE.md §1), giving the same ids,
// tokens and offsets (in bytes of the input) and the same decoded text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/tokenizer/added_vocabulary.h"
#include "text/tokenizer/decoders.h"
#include "text/tokenizer/encoding.h"
#include "text/tokenizer/normalizers.h"
#include "text/tokenizer/post_processors.h"
#include "text/tokenizer/pre_tokenizers.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/tokenizer_model.h"

namespace attnserve {

class HfTokenizer final : public Tokenizer {
 public:
  // Errors name the file and the field or the unsupported component.
  static absl::StatusOr<HfTokenizer> FromFile(const std::string& path);
  static absl::StatusOr<HfTokenizer> FromJson(const std::string& text, const std::string& path);

  absl::StatusOr<Encoding> Encode(const std::string& text,
                                  bool add_special_tokens = true) const override;
  // Unknown ids are skipped, as the reference skips them.
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids,
                                     bool skip_special_tokens = false) const override;
  size_t IncompleteCharacterTokens(const std::vector<int64_t>& ids) const override;
  std::string TokenText(int64_t id) const override;
  std::optional<std::string> TokenBytes(int64_t id) const override;

  // The model's: "BPE", "WordPiece" or "Unigram".
  std::string type() const override { return model_->type(); }
  int64_t vocab_size() const override;
  std::map<std::string, int64_t> special_tokens() const override;
  int64_t TokenToId(const std::string& token) const override;

  // A token's string: an added token's content or the model's vocabulary key; empty if unknown.
  std::string IdToToken(int64_t id) const;

 protected:
  absl::StatusOr<Encoding> EncodeSequence(const std::string& text) const override;
  Encoding AddSpecialTokens(Encoding sequence, const std::string& text) const override;
  absl::StatusOr<Encoding> JoinPair(Encoding first, const std::string& first_text, Encoding second,
                                    const std::string& second_text) const override;
  size_t AddedTokens(bool pair) const override;

 private:
  std::shared_ptr<const Normalizer> normalizer_;
  std::shared_ptr<const PreTokenizer> pre_tokenizer_;
  std::shared_ptr<const TokenizerModel> model_;
  std::shared_ptr<const PostProcessor> post_processor_;
  std::shared_ptr<const Decoder> decoder_;
  AddedVocabulary added_;
};

}  // namespace attnserve
