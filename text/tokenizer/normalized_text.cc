#include "text/tokenizer/normalized_text.h"

#include <algorithm>

#include "text/tokenizer/unicode.h"

namespace attnserve {
namespace {

int Utf8Length(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

// Decomposition with canonical ordering, each char tagged 0 (the first of its source char's
// decomposition) or 1 (inserted): unicode-normalization-alignments' Decompositions.
std::vector<NormalizedText::Edit> Decompose(const std::vector<char32_t>& chars, bool compat) {
  struct Pending {
    uint8_t ccc;
    NormalizedText::Edit edit;
  };
  std::vector<Pending> buffer;
  size_t ready = 0;
  const auto sort_pending = [&] {
    std::stable_sort(buffer.begin() + static_cast<std::ptrdiff_t>(ready), buffer.end(),
                     [](const Pending& a, const Pending& b) { return a.ccc < b.ccc; });
    ready = buffer.size();
  };
  const auto push = [&](char32_t c, bool first) {
    const uint8_t ccc = unicode::CombiningClass(c);
    if (ccc == 0) sort_pending();
    buffer.push_back({ccc, {c, first ? 0 : 1}});
  };
  for (char32_t c : chars) {
    const std::u32string parts = unicode::Decomposition(c, compat);
    if (parts.empty()) {
      push(c, true);
      continue;
    }
    for (size_t i = 0; i < parts.size(); ++i) push(parts[i], i == 0);
  }
  sort_pending();
  std::vector<NormalizedText::Edit> edits;
  edits.reserve(buffer.size());
  for (const Pending& pending : buffer) edits.push_back(pending.edit);
  return edits;
}

// Canonical composition of a decomposed stream, the changes combined as the starter absorbs a
// mark: unicode-normalization-alignments' Recompositions, step for step.
std::vector<NormalizedText::Edit> Recompose(const std::vector<NormalizedText::Edit>& decomposed) {
  using Edit = NormalizedText::Edit;
  std::vector<Edit> out, buffer;
  std::optional<Edit> composee;
  int last_ccc = -1;  // of the last mark buffered since the composee; -1: none
  const auto flush_buffer = [&] {
    out.insert(out.end(), buffer.begin(), buffer.end());
    buffer.clear();
  };
  for (const Edit& e : decomposed) {
    const uint8_t ccc = unicode::CombiningClass(e.c);
    if (!composee) {
      if (ccc != 0) {
        out.push_back(e);
      } else {
        composee = e;
      }
      continue;
    }
    const Edit k = *composee;
    if (last_ccc >= 0 && last_ccc >= ccc) {  // blocked from the composee
      if (ccc == 0) {
        composee = e;
        last_ccc = -1;
        out.push_back(k);
        flush_buffer();
      } else {
        buffer.push_back(e);
        last_ccc = ccc;
      }
      continue;
    }
    if (const char32_t composed = unicode::Compose(k.c, e.c); composed != 0) {
      composee = Edit{composed, k.change + e.change - 1};
      continue;
    }
    if (last_ccc < 0 && ccc == 0) {
      composee = e;
      out.push_back(k);
      continue;
    }
    buffer.push_back(e);
    last_ccc = ccc;
  }
  if (composee) out.push_back(*composee);
  flush_buffer();
  return out;
}

}  // namespace

std::vector<char32_t> CodePoints(const std::string& text) {
  std::vector<char32_t> chars;
  std::string_view rest = text;
  while (!rest.empty()) {
    const unicode::Decoded d = unicode::DecodeUtf8(rest);
    chars.push_back(d.code_point);
    rest.remove_prefix(d.bytes);
  }
  return chars;
}

NormalizedText::NormalizedText(std::string original)
    : original_(std::move(original)), normalized_(original_) {
  alignments_.reserve(original_.size());
  std::string_view rest = original_;
  size_t at = 0;
  while (!rest.empty()) {
    const int bytes = unicode::DecodeUtf8(rest).bytes;
    for (int i = 0; i < bytes; ++i) alignments_.push_back({at, at + bytes});
    at += bytes;
    rest.remove_prefix(bytes);
  }
}

bool NormalizedText::ReplaceInPlace(ByteRange range, const std::vector<Edit>& edits) {
  // Each char by one char of as many bytes: the text keeps its length, and each new char's bytes
  // take its first byte's alignment, as Transform would give them.
  size_t offset = range.begin, next = 0;
  for (; offset < range.end && next < edits.size(); ++next) {
    const int bytes = unicode::DecodeUtf8({normalized_.data() + offset, range.end - offset}).bytes;
    if (edits[next].change != 0 || Utf8Length(edits[next].c) != bytes) return false;
    offset += bytes;
  }
  if (offset != range.end || next != edits.size()) return false;
  std::string encoded;
  offset = range.begin;
  for (const Edit& edit : edits) {
    encoded.clear();
    unicode::AppendUtf8(edit.c, encoded);
    normalized_.replace(offset, encoded.size(), encoded);
    std::fill(alignments_.begin() + static_cast<std::ptrdiff_t>(offset + 1),
              alignments_.begin() + static_cast<std::ptrdiff_t>(offset + encoded.size()),
              alignments_[offset]);
    offset += encoded.size();
  }
  return true;
}

void NormalizedText::Transform(ByteRange range, const std::vector<Edit>& edits, size_t skipped) {
  if (skipped == 0 && ReplaceInPlace(range, edits)) return;
  std::vector<int> source_lengths;  // UTF-8 length of each char of the range
  for (std::string_view rest(normalized_.data() + range.begin, range.end - range.begin);
       !rest.empty();) {
    const int bytes = unicode::DecodeUtf8(rest).bytes;
    source_lengths.push_back(bytes);
    rest.remove_prefix(bytes);
  }
  size_t next_source = 0, offset = range.begin;
  const auto consume = [&] {
    if (next_source < source_lengths.size()) offset += source_lengths[next_source++];
  };
  for (size_t i = 0; i < skipped; ++i) consume();
  std::string text;
  std::vector<ByteRange> alignments;
  for (const Edit& edit : edits) {
    ByteRange alignment;
    if (edit.change > 0) {  // inserted: aligned with the byte before the cursor
      alignment = offset == 0 ? ByteRange{0, 0} : alignments_[offset - 1];
    } else {
      alignment = offset < alignments_.size()
                      ? alignments_[offset]
                      : (offset == 0 ? ByteRange{0, 0} : alignments_[offset - 1]);
      consume();
      for (int removed = 0; removed < -edit.change; ++removed) consume();
    }
    unicode::AppendUtf8(edit.c, text);
    alignments.insert(alignments.end(), Utf8Length(edit.c), alignment);
  }
  normalized_.replace(range.begin, range.end - range.begin, text);
  alignments_.erase(alignments_.begin() + static_cast<std::ptrdiff_t>(range.begin),
                    alignments_.begin() + static_cast<std::ptrdiff_t>(range.end));
  alignments_.insert(alignments_.begin() + static_cast<std::ptrdiff_t>(range.begin),
                     alignments.begin(), alignments.end());
}

std::optional<ByteRange> NormalizedText::ToOriginal(ByteRange range) const {
  if (range.begin == range.end) return range;
  if (range.begin > range.end || range.end > alignments_.size()) return std::nullopt;
  return ByteRange{alignments_[range.begin].begin, alignments_[range.end - 1].end};
}

std::optional<ByteRange> NormalizedText::ToNormalized(ByteRange range) const {
  if (range.begin == range.end) return range;
  if (range.begin > range.end) return std::nullopt;
  std::optional<size_t> start, end;
  for (size_t i = 0; i < alignments_.size() && range.end >= alignments_[i].end; ++i) {
    const ByteRange& a = alignments_[i];
    if (!start && range.begin <= a.begin && a.begin != a.end) start = i;
    end = i + 1;
  }
  if (start && end) return ByteRange{*start, *end};
  if (start) return ByteRange{*start, *start};
  if (end) return ByteRange{*end, *end};
  return std::nullopt;
}

std::optional<NormalizedText> NormalizedText::Slice(ByteRange range) const {
  const auto on_boundary = [](const std::string& s, size_t i) {
    return i == s.size() || (i < s.size() && (static_cast<uint8_t>(s[i]) & 0xC0) != 0x80);
  };
  if (range.begin > range.end || range.end > normalized_.size() ||
      !on_boundary(normalized_, range.begin) || !on_boundary(normalized_, range.end)) {
    return std::nullopt;
  }
  const std::optional<ByteRange> in_original = ToOriginal(range);
  if (!in_original) return std::nullopt;
  NormalizedText slice;
  if (in_original->end <= original_.size() && on_boundary(original_, in_original->begin) &&
      on_boundary(original_, in_original->end)) {
    slice.original_ = original_.substr(in_original->begin, in_original->end - in_original->begin);
  }
  slice.normalized_ = normalized_.substr(range.begin, range.end - range.begin);
  slice.alignments_.assign(alignments_.begin() + static_cast<std::ptrdiff_t>(range.begin),
                           alignments_.begin() + static_cast<std::ptrdiff_t>(range.end));
  for (ByteRange& a : slice.alignments_) {
    a.begin -= in_original->begin;
    a.end -= in_original->begin;
  }
  slice.original_shift_ = original_shift_ + in_original->begin;
  return slice;
}

void NormalizedText::Filter(const std::function<bool(char32_t)>& keep) {
  std::vector<Edit> edits;
  int removed = 0;
  size_t removed_first = 0;
  std::optional<char32_t> last;
  for (char32_t c : CodePoints(normalized_)) {
    if (keep(c)) {
      if (last) {
        edits.push_back({*last, -removed});
      } else {
        removed_first = static_cast<size_t>(removed);
      }
      last = c;
      removed = 0;
    } else {
      ++removed;
    }
  }
  if (last) edits.push_back({*last, -removed});
  if (removed_first == 0 && removed == 0 &&
      std::all_of(edits.begin(), edits.end(), [](const Edit& e) { return e.change == 0; })) {
    return;  // nothing filtered out
  }
  Transform(edits, removed_first);
}

void NormalizedText::Map(const std::function<char32_t(char32_t)>& map) {
  std::vector<Edit> edits;
  for (char32_t c : CodePoints(normalized_)) edits.push_back({map(c), 0});
  Transform(edits, 0);
}

void NormalizedText::Lowercase() {
  std::vector<Edit> edits;
  for (char32_t c : CodePoints(normalized_)) {
    if (c < 0x80) {  // ASCII, without a string per char
      edits.push_back({c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c, 0});
      continue;
    }
    const std::u32string lowered = unicode::ToLowercase(c);
    for (size_t i = 0; i < lowered.size(); ++i) edits.push_back({lowered[i], i == 0 ? 0 : 1});
  }
  Transform(edits, 0);
}

void NormalizedText::Prepend(const std::string& text) {
  if (normalized_.empty() || text.empty()) return;
  const unicode::Decoded first = unicode::DecodeUtf8(normalized_);
  std::vector<Edit> edits;
  for (char32_t c : CodePoints(text)) edits.push_back({c, edits.empty() ? 0 : 1});
  edits.push_back({first.code_point, 1});
  Transform({0, static_cast<size_t>(first.bytes)}, edits, 0);
}

void NormalizedText::Append(const std::string& text) {
  if (normalized_.empty() || text.empty()) return;
  size_t last = normalized_.size() - 1;
  while (last > 0 && (static_cast<uint8_t>(normalized_[last]) & 0xC0) == 0x80) --last;
  std::vector<Edit> edits{{unicode::DecodeUtf8(normalized_.substr(last)).code_point, 0}};
  for (char32_t c : CodePoints(text)) edits.push_back({c, 1});
  Transform({last, normalized_.size()}, edits, 0);
}

void NormalizedText::Strip(bool left, bool right) {
  const std::vector<char32_t> chars = CodePoints(normalized_);
  size_t leading = 0, trailing = 0;
  if (left) {
    while (leading < chars.size() && unicode::IsWhitespace(chars[leading])) ++leading;
  }
  if (right) {
    while (trailing < chars.size() - std::min(leading, chars.size()) &&
           unicode::IsWhitespace(chars[chars.size() - 1 - trailing])) {
      ++trailing;
    }
  }
  if (leading == 0 && trailing == 0) return;
  std::vector<Edit> edits;
  for (size_t i = leading; i + trailing < chars.size(); ++i) edits.push_back({chars[i], 0});
  if (!edits.empty()) edits.back().change = -static_cast<int>(trailing);
  Transform(edits, leading);
}

void NormalizedText::Replace(const std::vector<ByteRange>& matches, const std::string& content) {
  const std::vector<char32_t> replacement = CodePoints(content);
  std::string text;
  std::vector<ByteRange> alignments;
  size_t copied = 0;
  for (const ByteRange& match : matches) {
    text.append(normalized_, copied, match.begin - copied);
    alignments.insert(alignments.end(), alignments_.begin() + static_cast<std::ptrdiff_t>(copied),
                      alignments_.begin() + static_cast<std::ptrdiff_t>(match.begin));
    const ByteRange alignment = match.end == 0 ? ByteRange{0, 0} : alignments_[match.end - 1];
    for (char32_t c : replacement) {
      unicode::AppendUtf8(c, text);
      alignments.insert(alignments.end(), Utf8Length(c), alignment);
    }
    copied = match.end;
  }
  text.append(normalized_, copied);
  alignments.insert(alignments.end(), alignments_.begin() + static_cast<std::ptrdiff_t>(copied),
                    alignments_.end());
  normalized_ = std::move(text);
  alignments_ = std::move(alignments);
}

void NormalizedText::Normalize(Form form) {
  const bool compat = form == Form::kNfkc || form == Form::kNfkd;
  std::vector<Edit> edits = Decompose(CodePoints(normalized_), compat);
  if (form == Form::kNfc || form == Form::kNfkc) edits = Recompose(edits);
  Transform(edits, 0);
}

}  // namespace attnserve
