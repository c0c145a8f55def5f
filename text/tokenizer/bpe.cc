#include "text/tokenizer/bpe.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {
namespace {

absl::StatusOr<std::string> OptionalString(const nlohmann::json& model, const char* name) {
  auto it = model.find(name);
  if (it == model.end() || it->is_null()) return std::string();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("model.", name, ": a string is required"));
  }
  return it->get<std::string>();
}

absl::StatusOr<bool> OptionalFlag(const nlohmann::json& model, const char* name) {
  auto it = model.find(name);
  if (it == model.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("model.", name, ": a boolean is required"));
  }
  return it->get<bool>();
}

// One merge of the "merges" list: "left right" or ["left", "right"].
absl::StatusOr<std::pair<std::string, std::string>> MergePair(const nlohmann::json& merge,
                                                              size_t index) {
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::make_pair(merge[0].get<std::string>(), merge[1].get<std::string>());
  }
  if (merge.is_string()) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    if (space != std::string::npos && text.find(' ', space + 1) == std::string::npos) {
      return std::make_pair(text.substr(0, space), text.substr(space + 1));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model.merges[", index, "]: \"left right\" or [\"left\", \"right\"] is required"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Bpe>> Bpe::FromJson(const nlohmann::json& model) {
  auto bpe = std::make_unique<Bpe>();
  ASSIGN_OR_RETURN(bpe->vocab_, VocabularyFromJson(model));
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    // Dropout skips merges at random when it is not 0: the ids would not be reproducible.
    if (!it->is_number() || it->get<double>() != 0.0) {
      return absl::InvalidArgumentError(
          "model.dropout: only null or 0 is supported (dropout is for training)");
    }
  }
  ASSIGN_OR_RETURN(std::string unk, OptionalString(model, "unk_token"));
  ASSIGN_OR_RETURN(bpe->prefix_, OptionalString(model, "continuing_subword_prefix"));
  ASSIGN_OR_RETURN(bpe->suffix_, OptionalString(model, "end_of_word_suffix"));
  ASSIGN_OR_RETURN(bpe->fuse_unk_, OptionalFlag(model, "fuse_unk"));
  ASSIGN_OR_RETURN(bpe->byte_fallback_, OptionalFlag(model, "byte_fallback"));
  ASSIGN_OR_RETURN(bpe->ignore_merges_, OptionalFlag(model, "ignore_merges"));
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    bpe->unk_token_ = std::move(unk);
  }
  for (int b = 0; b < 256; ++b) {
    bpe->byte_ids_[b] = static_cast<int32_t>(bpe->vocab_.Id(absl::StrFormat("<0x%02X>", b)));
  }
  bpe->char_ids_.assign(kCharTable, -1);
  std::string utf8;
  for (char32_t c = 0; c < kCharTable; ++c) {
    utf8.clear();
    unicode::AppendUtf8(c, utf8);
    bpe->char_ids_[c] = static_cast<int32_t>(bpe->vocab_.Id(utf8));
  }

  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return absl::InvalidArgumentError("model.merges: an array is required");
  }
  bpe->merges_.reserve(merges->size());
  int32_t rank = 0;
  bool crosses_metaspace = false;
  for (size_t i = 0; i < merges->size(); ++i) {
    const nlohmann::json& merge = (*merges)[i];
    if (merge.is_string() && merge.get<std::string>().starts_with("#version")) continue;
    ASSIGN_OR_RETURN(const auto pair, MergePair(merge, i));
    const auto& [left, right] = pair;
    const int64_t left_id = bpe->vocab_.Id(left), right_id = bpe->vocab_.Id(right);
    if (right.size() < bpe->prefix_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.merges[", i, "]: \"", right, "\" is shorter than the continuing-subword prefix"));
    }
    // The merged token drops the length of the continuing-subword prefix from the right part.
    const std::string merged = left + right.substr(bpe->prefix_.size());
    const int64_t merged_id = bpe->vocab_.Id(merged);
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("model.merges[", i, "]: \"",
                                                     left_id < 0    ? left
                                                     : right_id < 0 ? right
                                                                    : merged,
                                                     "\" is not in the vocabulary"));
    }
    // A pair listed twice keeps its last rank, as the reference's map does; "#version" lines
    // take no rank.
    bpe->merges_[PairKey(left_id, right_id)] = {rank++, static_cast<int32_t>(merged_id)};
    bpe->merged_by_rank_.push_back(static_cast<int32_t>(merged_id));
    // A merge that puts "▁" after another character would join across a word's spaces.
    if (right.starts_with("\u2581") && !left.ends_with("\u2581")) crosses_metaspace = true;
  }
  bpe->splits_at_metaspace_ = bpe->prefix_.empty() && bpe->suffix_.empty() &&
                              bpe->vocab_.Id("\u2581") >= 0 && !crosses_metaspace;
  return bpe;
}

absl::StatusOr<std::vector<ModelToken>> Bpe::Tokenize(std::string_view word) const {
  constexpr std::string_view kMetaspace = "\u2581";
  std::vector<ModelToken> tokens;
  if (!splits_at_metaspace_ || ignore_merges_) {
    RETURN_IF_ERROR(TokenizeWord(word, 0, tokens));
    return tokens;
  }
  // No merge joins a symbol that ends in another character to one that starts with "▁" (checked
  // at load), so the pieces that start there merge alone: the heap stays a word's size when the
  // word is a whole paragraph (no pre-tokenizer), and the tokens are the same.
  size_t start = 0;
  for (size_t at = word.find(kMetaspace, 1); at != std::string_view::npos;
       at = word.find(kMetaspace, at + kMetaspace.size())) {
    if (word.substr(0, at).ends_with(kMetaspace)) continue;
    RETURN_IF_ERROR(TokenizeWord(word.substr(start, at - start), start, tokens));
    start = at;
  }
  RETURN_IF_ERROR(TokenizeWord(word.substr(start), start, tokens));
  return tokens;
}

absl::Status Bpe::TokenizeWord(std::string_view word, size_t offset,
                               std::vector<ModelToken>& tokens) const {
  if (word.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    if (int64_t id = vocab_.Id(word); id >= 0) {
      tokens.push_back({id, *vocab_.Token(id), {offset, offset + word.size()}});
      return absl::OkStatus();
    }
  }
  thread_local std::vector<WordCache::Piece> pieces;
  pieces.clear();
  if (!cache_.Find(word, pieces)) {
    RETURN_IF_ERROR(MergeWord(word, pieces));
    cache_.Insert(word, pieces);
  }
  for (const WordCache::Piece& piece : pieces) {
    tokens.push_back({piece.id, *vocab_.Token(piece.id), {offset, offset + piece.bytes}});
    offset += piece.bytes;
  }
  return absl::OkStatus();
}

absl::Status Bpe::MergeWord(std::string_view word, std::vector<WordCache::Piece>& pieces) const {
  // The word's symbols, a doubly linked list so that merges are O(1); kept between calls.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    size_t bytes;  // 0: merged into the symbol before it
  };
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  const auto add = [](int64_t id, size_t bytes) {
    const int32_t at = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<int32_t>(id), at - 1, at + 1, bytes});
  };
  // A pending unknown token (kept pending so that unknown chars in a row can fuse): id, bytes.
  int64_t unknown_id = -1;
  size_t unknown_bytes = 0;
  const auto flush_unknown = [&] {
    if (unknown_id >= 0) add(unknown_id, unknown_bytes);
    unknown_id = -1;
  };
  std::string symbol;
  for (size_t at = 0; at < word.size();) {
    const unicode::Decoded decoded = unicode::DecodeUtf8(word.substr(at));
    const size_t length = decoded.bytes;
    const bool first = at == 0, last = at + length == word.size();
    const std::string_view char_bytes = word.substr(at, length);
    at += length;
    // The symbol is the bare char unless a prefix (past the first) or suffix (on the last) goes
    // with it.
    const bool bare = (first || prefix_.empty()) && (!last || suffix_.empty());
    const bool in_table = bare && decoded.code_point < kCharTable;
    symbol.clear();
    if (!in_table || char_ids_[decoded.code_point] < 0) {
      if (!first) symbol += prefix_;
      symbol.append(char_bytes);
      if (last) symbol += suffix_;
    }
    const int64_t id = in_table ? char_ids_[decoded.code_point] : vocab_.Id(symbol);
    if (id >= 0) {
      flush_unknown();
      add(id, length);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char b : symbol) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all_bytes) {
        // As the reference does, a pending unknown token stays pending.
        for (char b : symbol) add(byte_ids_[static_cast<uint8_t>(b)], 1);
        continue;
      }
    }
    if (!unk_token_) continue;  // no unknown token: the reference drops the char
    const int64_t unk_id = vocab_.Id(*unk_token_);
    if (unk_id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the unknown token \"", *unk_token_, "\" is not in the vocabulary"));
    }
    if (unknown_id >= 0 && fuse_unk_) {
      unknown_bytes += length;
    } else {
      flush_unknown();
      unknown_id = unk_id;
      unknown_bytes = length;
    }
  }
  flush_unknown();
  if (symbols.empty()) return absl::OkStatus();
  symbols.back().next = -1;

  // Lowest rank first, then leftmost; entries made stale by earlier merges are skipped. A
  // binary heap of 16-byte entries (the merged token comes from the rank), built in linear time:
  // a word without a pre-tokenizer (Llama 2's) is a whole paragraph, and the heap's size and
  // depth are what its merging costs.
  struct Candidate {
    uint64_t order;  // rank, then position: one comparison
    int32_t left, right;
    int32_t rank() const { return static_cast<int32_t>(order >> 32); }
    int32_t position() const { return static_cast<int32_t>(order & 0xFFFFFFFF); }
    bool operator<(const Candidate& other) const { return order > other.order; }
  };
  thread_local std::vector<Candidate> heap;
  heap.clear();
  const auto candidate = [&](int32_t position) -> std::optional<Candidate> {
    const Symbol& left = symbols[position];
    if (left.next < 0) return std::nullopt;
    const int32_t right = symbols[left.next].id;
    auto it = merges_.find(PairKey(left.id, right));
    if (it == merges_.end()) return std::nullopt;
    return Candidate{
        (static_cast<uint64_t>(it->second.rank) << 32) | static_cast<uint32_t>(position), left.id,
        right};
  };
  const auto consider = [&](int32_t position) {
    if (auto c = candidate(position)) {
      heap.push_back(*c);
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) {
    if (auto c = candidate(i)) heap.push_back(*c);
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    const int32_t position = top.position();
    Symbol& left = symbols[position];
    if (left.bytes == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const int32_t merged = merged_by_rank_[top.rank()];
    // A stale entry (a neighbour merged since) still counts if the pair there now merges into
    // the same token, as in the reference; the same pair always does.
    if (left.id != top.left || right.id != top.right) {
      auto it = merges_.find(PairKey(left.id, right.id));
      if (it == merges_.end() || it->second.merged != merged) continue;
    }
    left.id = merged;
    left.bytes += right.bytes;
    right.bytes = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = position;
    if (left.prev >= 0) consider(left.prev);
    consider(position);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    pieces.push_back({symbols[i].id, static_cast<uint32_t>(symbols[i].bytes)});
  }
  return absl::OkStatus();
}

}  // namespace attnserve
