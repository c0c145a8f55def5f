// A Hugging Face tokenizer.json: added tokens, normalizer, pre-tokenizer, model, post-processor
// and decoder, run as the reference library runs them (REFERENCE.md §1), giving the same ids,
// tokens and offsets (in bytes of the input) and the same decoded text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/added_vocabulary.h"
#include "engine/tokenizer/decoders.h"
#include "engine/tokenizer/encoding.h"
#include "engine/tokenizer/normalizers.h"
#include "engine/tokenizer/post_processors.h"
#include "engine/tokenizer/pre_tokenizers.h"
#include "engine/tokenizer/tokenizer_model.h"

namespace attnserve {

class HfTokenizer {
 public:
  // Errors name the file and the field or the unsupported component.
  static absl::StatusOr<HfTokenizer> FromFile(const std::string& path);
  static absl::StatusOr<HfTokenizer> FromJson(const std::string& text, const std::string& path);

  // An error (INVALID_ARGUMENT) names what the tokenizer cannot encode.
  absl::StatusOr<Encoding> Encode(const std::string& text, bool add_special_tokens = true) const;
  // Unknown ids are skipped, as the reference skips them.
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;

  int64_t vocab_size() const;
  // A token's string: an added token's content or the model's vocabulary key; empty if unknown.
  std::string IdToToken(int64_t id) const;
  // An added token's or a vocabulary token's id, or -1.
  int64_t TokenToId(const std::string& token) const;
  // "BPE", "WordPiece" or "Unigram".
  const char* model_type() const { return model_->type(); }
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

 private:
  std::shared_ptr<const Normalizer> normalizer_;
  std::shared_ptr<const PreTokenizer> pre_tokenizer_;
  std::shared_ptr<const TokenizerModel> model_;
  std::shared_ptr<const PostProcessor> post_processor_;
  std::shared_ptr<const Decoder> decoder_;
  AddedVocabulary added_;
};

}  // namespace attnserve
