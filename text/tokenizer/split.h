// Splitting normalized text at pattern matches, with each of Hugging Face's delimiter behaviours
// (REFERENCE.md §3).
#pragma once

#include <functional>
#include <vector>

#include "text/tokenizer/normalized_text.h"

namespace attnserve {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Pieces covering the whole text in order; `delimiter` marks pattern matches.
struct Piece {
  ByteRange range;
  bool delimiter = false;
};

// Every char for which `matches` holds is a delimiter of its own; the runs between are pieces.
std::vector<Piece> CharPieces(const std::string& text,
                              const std::function<bool(char32_t)>& matches);

// The text split at the delimiters; empty parts included (the caller drops them).
std::vector<NormalizedText> Split(const NormalizedText& text, const std::vector<Piece>& pieces,
                                  SplitBehavior behavior);

}  // namespace attnserve
