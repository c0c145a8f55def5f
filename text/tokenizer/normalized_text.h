// Text under normalization that remembers where each of its bytes came from, as Hugging Face's
// NormalizedString does (REFERENCE.md §2): every normalizer edits it, pre-tokenizers split it,
// and a token's offsets in the normalized text map back to byte offsets in the input.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnserve {

// A byte range [begin, end).
struct ByteRange {
  size_t begin = 0, end = 0;
  bool operator==(const ByteRange&) const = default;
};

class NormalizedText {
 public:
  explicit NormalizedText(std::string original = "");

  const std::string& original() const { return original_; }
  const std::string& normalized() const { return normalized_; }
  // Where original() starts in the whole input (non-zero for a slice).
  size_t original_shift() const { return original_shift_; }
  // Per byte of normalized(): the byte range of original() it came from.
  const std::vector<ByteRange>& alignments() const { return alignments_; }

  // One char of an edit and how it relates to the text it replaces: 1 inserted; 0 replaces the
  // next char; -n replaces the next char and removes the n after it.
  struct Edit {
    char32_t c;
    int change;
  };
  // Replaces the normalized bytes [range.begin, range.end) by `edits`, the first `skipped` chars
  // of the range being removed before the first edit.
  void Transform(ByteRange range, const std::vector<Edit>& edits, size_t skipped);
  void Transform(const std::vector<Edit>& edits, size_t skipped) {
    Transform({0, normalized_.size()}, edits, skipped);
  }

  // A normalized byte range in original() (not shifted); nullopt when it is not in bounds.
  std::optional<ByteRange> ToOriginal(ByteRange normalized) const;
  // An original byte range in normalized().
  std::optional<ByteRange> ToNormalized(ByteRange original) const;
  // The part of the text at a normalized byte range, with its own original and shift.
  std::optional<NormalizedText> Slice(ByteRange normalized) const;

  void Filter(const std::function<bool(char32_t)>& keep);
  void Map(const std::function<char32_t(char32_t)>& map);
  void Lowercase();
  void Prepend(const std::string& text);
  void Append(const std::string& text);
  void Strip(bool left, bool right);
  // Every match, a normalized byte range, replaced by `content` (all its chars aligned to the
  // match's last byte).
  void Replace(const std::vector<ByteRange>& matches, const std::string& content);
  enum class Form { kNfc, kNfd, kNfkc, kNfkd };
  void Normalize(Form form);

 private:
  // Transform's work when every edit replaces a char by one of as many bytes; false (nothing
  // done) otherwise.
  bool ReplaceInPlace(ByteRange range, const std::vector<Edit>& edits);
  std::string original_, normalized_;
  std::vector<ByteRange> alignments_;
  size_t original_shift_ = 0;
};

// The UTF-8 of `text` as code points.
std::vector<char32_t> CodePoints(const std::string& text);

}  // namespace attnserve
