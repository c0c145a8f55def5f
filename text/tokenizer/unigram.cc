#include "text/tokenizer/unigram.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {
namespace {

// The reference's penalty of the unknown token below the lowest score.
constexpr double kUnknownPenalty = 10.0;

absl::Status MissingUnknown() {
  return absl::InvalidArgumentError(
      "the text has a character that is not in the vocabulary, and the tokenizer has no unknown "
      "token (model.unk_id is null)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Unigram>> Unigram::FromJson(const nlohmann::json& model) {
  auto unigram = std::make_unique<Unigram>();
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_array()) {
    return absl::InvalidArgumentError("model.vocab: an array of [piece, score] is required");
  }
  unigram->nodes_.emplace_back();
  double min_score = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < vocab->size(); ++i) {
    const nlohmann::json& entry = (*vocab)[i];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.vocab[", i, "]: [piece, score] is required"));
    }
    const std::string piece = entry[0].get<std::string>();
    const double score = entry[1].get<double>();
    const int64_t id = static_cast<int64_t>(i);
    unigram->vocab_.ids[piece] = id;  // a piece listed twice keeps its last id
    unigram->vocab_.AddToken(id, piece);
    unigram->scores_.push_back(score);
    min_score = std::min(min_score, score);
    if (piece.empty()) continue;
    int32_t node = 0;
    for (char c : piece) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
      auto [it, inserted] =
          unigram->edges_.try_emplace(key, static_cast<int32_t>(unigram->nodes_.size()));
      if (inserted) unigram->nodes_.emplace_back();
      node = it->second;
    }
    unigram->nodes_[node].piece = static_cast<int32_t>(id);
  }
  unigram->vocab_.size = static_cast<int64_t>(vocab->size());
  for (auto& node : unigram->nodes_) {
    if (node.piece >= 0)
      node.piece = static_cast<int32_t>(unigram->vocab_.ids.at(*unigram->vocab_.Token(node.piece)));
  }
  unigram->unk_score_ = min_score - kUnknownPenalty;
  if (auto unk = model.find("unk_id"); unk != model.end() && !unk->is_null()) {
    if (!unk->is_number_unsigned() || unk->get<uint64_t>() >= vocab->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.unk_id: ", unk->dump(), " is not an index of model.vocab"));
    }
    unigram->unk_id_ = unk->get<int64_t>();
  }
  if (auto fallback = model.find("byte_fallback");
      fallback != model.end() && !fallback->is_null()) {
    if (!fallback->is_boolean()) {
      return absl::InvalidArgumentError("model.byte_fallback: a boolean is required");
    }
    unigram->byte_fallback_ = fallback->get<bool>();
  }
  return unigram;
}

absl::StatusOr<std::vector<std::pair<int64_t, size_t>>> Unigram::Viterbi(
    std::string_view word) const {
  struct Best {
    double score = 0;
    int64_t id = -1;
    size_t begin = 0;
    bool set = false;
  };
  std::vector<Best> best(word.size() + 1);
  for (size_t begin = 0; begin < word.size();) {
    const double score_here = best[begin].score;
    const size_t char_bytes = unicode::DecodeUtf8(word.substr(begin)).bytes;
    bool single_char_piece = false;
    int32_t node = 0;
    for (size_t end = begin; end < word.size();) {
      node = Child(node, static_cast<uint8_t>(word[end]));
      if (node < 0) break;
      ++end;
      const int32_t piece = nodes_[node].piece;
      if (piece < 0) continue;
      // Strictly greater: on a tie the segmentation found first (the earlier start) stays.
      const double candidate = score_here + scores_[piece];
      if (!best[end].set || candidate > best[end].score)
        best[end] = {candidate, piece, begin, true};
      single_char_piece = single_char_piece || end - begin == char_bytes;
    }
    if (!single_char_piece) {
      if (unk_id_ < 0) return MissingUnknown();
      const double candidate = score_here + unk_score_;
      Best& slot = best[begin + char_bytes];
      if (!slot.set || candidate > slot.score) slot = {candidate, unk_id_, begin, true};
    }
    begin += char_bytes;
  }
  std::vector<std::pair<int64_t, size_t>> path;
  for (size_t end = word.size(); end > 0; end = best[end].begin) {
    path.emplace_back(best[end].id, best[end].begin);
  }
  return path;
}

absl::StatusOr<std::vector<ModelToken>> Unigram::Tokenize(std::string_view word) const {
  if (word.empty()) return std::vector<ModelToken>();
  ASSIGN_OR_RETURN(const auto path, Viterbi(word));
  // Pieces from the end; consecutive unknown pieces fuse into one.
  std::vector<ByteRange> pieces;
  size_t end = word.size();
  for (size_t i = 0; i < path.size(); ++i) {
    const auto [id, begin] = path[i];
    const bool fuse = id == unk_id_ && i > 0 && path[i - 1].first == unk_id_;
    if (fuse) {
      pieces.back().begin = begin;
    } else {
      pieces.push_back({begin, end});
    }
    end = begin;
  }
  std::reverse(pieces.begin(), pieces.end());
  std::vector<ModelToken> tokens;
  for (const ByteRange& range : pieces) {
    // The reference looks each piece's text up again: its token is that text, even when the id
    // is the unknown token's.
    const std::string text(word.substr(range.begin, range.end - range.begin));
    if (const int64_t id = vocab_.Id(text); id >= 0) {
      tokens.push_back({id, text, range});
      continue;
    }
    if (byte_fallback_) {
      std::vector<ModelToken> bytes;
      for (char b : text) {
        std::string name = absl::StrFormat("<0x%02X>", static_cast<uint8_t>(b));
        const int64_t id = vocab_.Id(name);
        if (id < 0) break;
        bytes.push_back({id, std::move(name), range});
      }
      if (bytes.size() == text.size()) {
        tokens.insert(tokens.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_id_ < 0) return MissingUnknown();
    tokens.push_back({unk_id_, text, range});
  }
  return tokens;
}

}  // namespace attnserve
