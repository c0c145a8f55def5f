#include "text/tokenizer/text_stream.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace attnserve {
namespace {

// Prompt tokens decoded again for context: enough for any decoder.
constexpr size_t kContextTokens = 4;

// The length of the longest common prefix of a and b that ends on a character boundary.
size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  while (n > 0 && n < a.size() && (static_cast<uint8_t>(a[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, const std::vector<int64_t>& prompt)
    : tokenizer_(&tokenizer) {
  const size_t context = std::min(prompt.size(), kContextTokens);
  window_.assign(prompt.end() - static_cast<std::ptrdiff_t>(context), prompt.end());
  // Context that ends inside a character would make the first piece start with the rest of it.
  if (tokenizer.IncompleteCharacterTokens(window_) > 0) window_.clear();
  context_tokens_ = window_.size();
  sent_ = Decode(0, window_.size());
}

std::string TextStream::Decode(size_t begin, size_t end) const {
  auto text = tokenizer_->Decode({window_.begin() + static_cast<std::ptrdiff_t>(begin),
                                  window_.begin() + static_cast<std::ptrdiff_t>(end)});
  return text.ok() ? *std::move(text) : std::string();
}

std::string TextStream::Send(const std::string& text, size_t tokens) {
  const size_t from = absl::StartsWith(text, sent_) ? sent_.size() : CommonPrefix(text, sent_);
  std::string piece = text.substr(from);
  text_ += piece;
  // The sent tokens become the context of the rest.
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(context_tokens_));
  context_tokens_ = tokens - context_tokens_;
  sent_ = Decode(0, context_tokens_);
  return piece;
}

std::string TextStream::Push(int64_t id) {
  window_.push_back(id);
  const size_t end = window_.size();
  const std::string now = Decode(0, end);
  if (absl::StartsWith(now, sent_)) {
    // The tokens of an incomplete last character (a byte-level or byte-fallback token can be
    // part of one) are held; the text before them is decided, unless the decoder reads them
    // together with the tokens before (ByteFallback a run of byte tokens): then all are held.
    const size_t split = end - tokenizer_->IncompleteCharacterTokens(window_);
    if (split == end) return now.size() > sent_.size() ? Send(now, end) : "";
    if (split > context_tokens_) {
      const std::string before = Decode(0, split);
      if (before.size() > sent_.size() && absl::StartsWith(before, sent_) &&
          before + Decode(split, end) == now) {
        return Send(before, split);
      }
    }
  }
  // Held while the decoder changes text already sent (ByteFallback turns a whole run of byte
  // tokens into U+FFFDs once it is not UTF-8), but not for ever.
  return end - context_tokens_ < kMaxHeldTokens ? "" : Send(now, end);
}

std::string TextStream::Finish() {
  std::string piece = Send(Decode(0, window_.size()), window_.size());
  window_.clear();
  context_tokens_ = 0;
  sent_.clear();
  return piece;
}

}  // namespace attnserve
