// Byte-pair encoding (REFERENCE.md §6.1), as GPT-2, RoBERTa and Llama 3 (over the byte-level
// alphabet) and SentencePiece-converted Llama 2 and Mistral tokenizers (with byte fallback) use
// it: a word starts as its chars, then the adjacent pair of lowest merge rank is merged, leftmost
// first, until no pair of the merge list is left.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer_model.h"
#include "text/tokenizer/word_cache.h"

namespace attnserve {

class Bpe final : public TokenizerModel {
 public:
  // From tokenizer.json's "model" object; errors name the field, the merge or the token.
  static absl::StatusOr<std::unique_ptr<Bpe>> FromJson(const nlohmann::json& model);

  absl::StatusOr<std::vector<ModelToken>> Tokenize(std::string_view word) const override;
  const Vocabulary& vocab() const override { return vocab_; }
  const char* type() const override { return "BPE"; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;  // the id of the merged token
  };
  // Appends one word's tokens (its chars, merged), their ranges `offset` bytes on.
  absl::Status TokenizeWord(std::string_view word, size_t offset,
                            std::vector<ModelToken>& tokens) const;
  // Appends the pieces the word's chars merge into.
  absl::Status MergeWord(std::string_view word, std::vector<WordCache::Piece>& pieces) const;
  static uint64_t PairKey(int64_t left, int64_t right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  }

  Vocabulary vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::vector<int32_t> merged_by_rank_;  // each rank's merged token
  std::optional<std::string> unk_token_;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  // No merge joins a symbol ending in another character to one starting with "▁" (Llama 2's,
  // Mistral's): a long word may be split before each "▁" that follows another character.
  bool splits_at_metaspace_ = false;
  std::array<int32_t, 256> byte_ids_{};  // "<0xAB>" tokens' ids, -1 where missing
  // A word starts as its chars' ids: those of the first code points, bare (without a
  // continuing-subword prefix or end-of-word suffix), are kept in a table (-1: not in the
  // vocabulary), so most chars need no hash lookup.
  static constexpr char32_t kCharTable = 0x3000;
  std::vector<int32_t> char_ids_;
  mutable WordCache cache_;
};

}  // namespace attnserve
