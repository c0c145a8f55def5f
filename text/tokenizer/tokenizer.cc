#include "text/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/tokenizer/post_processors.h"

namespace attnserve {
namespace {

// The tokens left for the texts once the special tokens have theirs; an error if none are.
absl::StatusOr<size_t> TextBudget(const Truncation& truncation, size_t added) {
  if (truncation.max_tokens <= added) {
    return absl::InvalidArgumentError(absl::StrCat("a limit of ", truncation.max_tokens,
                                                   " tokens leaves none for the text (", added,
                                                   " special tokens)"));
  }
  return truncation.max_tokens - added;
}

}  // namespace

absl::StatusOr<Encoding> Tokenizer::EncodeTruncated(const std::string& text,
                                                    const Truncation& truncation) const {
  if (truncation.max_tokens == 0) return Encode(text);
  ASSIGN_OR_RETURN(Encoding sequence, EncodeSequence(text));
  ASSIGN_OR_RETURN(const size_t budget, TextBudget(truncation, AddedTokens(false)));
  sequence.Truncate(budget, truncation.from_left);
  return AddSpecialTokens(std::move(sequence), text);
}

absl::StatusOr<Encoding> Tokenizer::EncodePair(const std::string& first, const std::string& second,
                                               const Truncation& truncation) const {
  ASSIGN_OR_RETURN(Encoding a, EncodeSequence(first));
  ASSIGN_OR_RETURN(Encoding b, EncodeSequence(second));
  if (truncation.max_tokens > 0 &&
      a.size() + b.size() + AddedTokens(true) > truncation.max_tokens) {
    ASSIGN_OR_RETURN(const size_t budget, TextBudget(truncation, AddedTokens(true)));
    size_t keep_a = a.size(), keep_b = b.size();
    switch (truncation.strategy) {
      case Truncation::Strategy::kLongestFirst: {
        // The shorter text stays whole if the longer one can give up enough; otherwise both
        // get half (the second the odd token), as tokenizers' longest_first.
        const size_t shorter = std::min(keep_a, keep_b);
        size_t short_keep = shorter,
               long_keep = std::max(shorter, budget - std::min(shorter, budget));
        if (short_keep + long_keep > budget) {
          short_keep = budget / 2;
          long_keep = short_keep + budget % 2;
        }
        if (keep_a <= keep_b) {
          keep_a = short_keep;
          keep_b = long_keep;
        } else {
          keep_a = long_keep;
          keep_b = short_keep;
        }
        break;
      }
      case Truncation::Strategy::kOnlyFirst:
      case Truncation::Strategy::kOnlySecond: {
        const bool first_goes = truncation.strategy == Truncation::Strategy::kOnlyFirst;
        const size_t kept = first_goes ? keep_b : keep_a;
        if (kept >= budget) {
          return absl::InvalidArgumentError(
              absl::StrCat("the ", first_goes ? "second" : "first", " text's ", kept,
                           " tokens leave none of the ", truncation.max_tokens,
                           "-token limit to the ", first_goes ? "first" : "second", " (truncation ",
                           first_goes ? "only_first" : "only_second", ")"));
        }
        (first_goes ? keep_a : keep_b) = budget - kept;
        break;
      }
    }
    a.Truncate(keep_a, truncation.from_left);
    b.Truncate(keep_b, truncation.from_left);
  }
  return JoinPair(std::move(a), first, std::move(b), second);
}

absl::StatusOr<Encoding> Tokenizer::JoinPair(Encoding first, const std::string&, Encoding second,
                                             const std::string&) const {
  return attnserve::JoinPair(std::move(first), std::move(second), 1);
}

}  // namespace attnserve
