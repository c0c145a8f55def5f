#include "text/tokenizer/split.h"

#include <algorithm>

#include "text/tokenizer/unicode.h"

namespace attnserve {

std::vector<Piece> CharPieces(const std::string& text,
                              const std::function<bool(char32_t)>& matches) {
  if (text.empty()) return {{{0, 0}, false}};
  std::vector<Piece> pieces;
  size_t at = 0, run_start = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    const unicode::Decoded d = unicode::DecodeUtf8(rest);
    if (matches(d.code_point)) {
      if (run_start < at) pieces.push_back({{run_start, at}, false});
      pieces.push_back({{at, at + d.bytes}, true});
      run_start = at + d.bytes;
    }
    at += d.bytes;
    rest.remove_prefix(d.bytes);
  }
  if (run_start < at) pieces.push_back({{run_start, at}, false});
  return pieces;
}

std::vector<NormalizedText> Split(const NormalizedText& text, const std::vector<Piece>& pieces,
                                  SplitBehavior behavior) {
  std::vector<ByteRange> kept;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Piece& p : pieces) {
        if (!p.delimiter) kept.push_back(p.range);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Piece& p : pieces) kept.push_back(p.range);
      break;
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (i > 0 && pieces[i].delimiter == pieces[i - 1].delimiter) {
          kept.back().end = pieces[i].range.end;
        } else {
          kept.push_back(pieces[i].range);
        }
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_was_text = false;
      for (const Piece& p : pieces) {
        if (p.delimiter && previous_was_text) {
          kept.back().end = p.range.end;
        } else {
          kept.push_back(p.range);
        }
        previous_was_text = !p.delimiter;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool next_is_text = false;
      for (auto p = pieces.rbegin(); p != pieces.rend(); ++p) {
        if (p->delimiter && next_is_text) {
          kept.back().begin = p->range.begin;
        } else {
          kept.push_back(p->range);
        }
        next_is_text = !p->delimiter;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  std::vector<NormalizedText> parts;
  for (const ByteRange& range : kept) {
    if (auto part = text.Slice(range)) parts.push_back(*std::move(part));
  }
  return parts;
}

}  // namespace attnserve
