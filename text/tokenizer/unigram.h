// Unigram (REFERENCE.md §6.3), as T5, ALBERT and XLM-R tokenizers use it: the segmentation of a
// word into vocabulary pieces with the highest total score (Viterbi), unknown chars fused into
// one unknown token, optionally falling back to byte tokens.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer/tokenizer_model.h"

namespace attnserve {

class Unigram final : public TokenizerModel {
 public:
  // From tokenizer.json's "model" object; errors name the field or the piece.
  static absl::StatusOr<std::unique_ptr<Unigram>> FromJson(const nlohmann::json& model);

  absl::StatusOr<std::vector<ModelToken>> Tokenize(std::string_view word) const override;
  const Vocabulary& vocab() const override { return vocab_; }
  const char* type() const override { return "Unigram"; }

 private:
  // A byte trie of the pieces: node 0 is the root.
  struct Node {
    int32_t piece = -1;  // the id of the piece that ends here
  };
  int32_t Child(int32_t node, uint8_t byte) const {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
    return it == edges_.end() ? -1 : it->second;
  }
  // The pieces, best first, by which the best segmentation of `word` ends: (piece, byte begin).
  absl::StatusOr<std::vector<std::pair<int64_t, size_t>>> Viterbi(std::string_view word) const;

  Vocabulary vocab_;
  std::vector<double> scores_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  int64_t unk_id_ = -1;
  double unk_score_ = 0;
  bool byte_fallback_ = false;
};

}  // namespace attnserve
