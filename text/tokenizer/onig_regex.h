// A regular expression run by Oniguruma, the engine the reference library uses for the ByteLevel,
// Split and Replace patterns (REFERENCE.md §3.1): Ruby syntax, UTF-8, Unicode 14 properties,
// and the reference's way of iterating over matches, empty ones included.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "text/tokenizer/split.h"

namespace attnserve {

class OnigRegex {
 public:
  // An error names the pattern and Oniguruma's complaint.
  static absl::StatusOr<OnigRegex> Compile(const std::string& pattern);
  // A literal string as a pattern (its metacharacters escaped).
  static absl::StatusOr<OnigRegex> Literal(const std::string& text);

  // Every match, left to right, as the reference's find_iter gives them: the search for the next
  // match sees the whole text, and an empty match right after the previous one is skipped.
  std::vector<ByteRange> FindAll(std::string_view text) const;
  // The matches as delimiters and the runs between them as text, covering `text` in order.
  std::vector<Piece> Pieces(std::string_view text) const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;  // immutable once compiled; searches may share it
  // A non-empty literal is found with std::string_view::find: the same matches, much faster.
  std::string literal_;
};

// The "pattern" of a Split pre-tokenizer or a Replace normalizer or decoder: {"String": s} (a
// literal) or {"Regex": r}, both run by Oniguruma as the reference runs them. `where` names the
// object in errors.
absl::StatusOr<OnigRegex> PatternFromJson(const nlohmann::json& json, const std::string& where);

}  // namespace attnserve
