#include "engine/tokenizer/text_stream.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace attnserve {
namespace {

// Prompt tokens decoded again for context: enough for any decoder.
constexpr size_t kContextTokens = 4;
// Tokens after which the bytes before them decode as they will stay (a character has at most 4
// bytes, each token at least one).
constexpr size_t kDecidingTokens = 3;
constexpr char kReplacement[] = "\xEF\xBF\xBD";

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
  const std::string text = Decode(0, window_.size());
  if (absl::EndsWith(text, kReplacement)) {
    window_.clear();
    Restart("");
  } else {
    Restart(text);
  }
}

std::string TextStream::Decode(size_t begin, size_t end) const {
  auto text = tokenizer_->Decode({window_.begin() + static_cast<std::ptrdiff_t>(begin),
                                  window_.begin() + static_cast<std::ptrdiff_t>(end)});
  return text.ok() ? *std::move(text) : std::string();
}

void TextStream::Restart(const std::string& now) {
  context_tokens_ = window_.size();
  sent_ = now;
}

void TextStream::Advance(size_t sent_tokens) {
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(context_tokens_));
  context_tokens_ = sent_tokens - context_tokens_;
  sent_ = Decode(0, context_tokens_);
}

std::string TextStream::Send(const std::string& now) {
  const size_t from = absl::StartsWith(now, sent_) ? sent_.size() : CommonPrefix(now, sent_);
  std::string piece = now.substr(from);
  text_ += piece;
  return piece;
}

std::string TextStream::Push(int64_t id) {
  window_.push_back(id);
  const std::string now = Decode(0, window_.size());
  // Held back while the text ends in U+FFFD (a character still to complete: ByteLevel and the
  // byte tokenizer replace an incomplete one by U+FFFD, ByteFallback a whole run of bytes with
  // one in it by one U+FFFD per byte) or while the decoder changes text already sent.
  const bool settled = absl::StartsWith(now, sent_) && !absl::EndsWith(now, kReplacement);
  if (settled) {
    if (now.size() <= sent_.size()) return "";
    std::string piece = Send(now);
    Advance(window_.size());  // every token's text is out: they are the next ones' context
    return piece;
  }
  if (window_.size() - context_tokens_ < kMaxHeldTokens) return "";
  // Held too long: send the text of the longest run of tokens that is decoded as it will stay,
  // and hold the rest. A character has at most 4 bytes and a token at least one, so the bytes
  // before the last kDecidingTokens tokens are decided; a split there is clean when the text of
  // the tokens before it and that of those after add up to the window's text.
  for (size_t split = window_.size() - kDecidingTokens; split > context_tokens_; --split) {
    const std::string before = Decode(0, split);
    if (absl::StartsWith(before, sent_) && before + Decode(split, window_.size()) == now) {
      std::string piece = Send(before);
      Advance(split);
      return piece;
    }
  }
  // No clean split (ByteFallback decodes a whole run of byte tokens at once): send it all.
  std::string piece = Send(now);
  Advance(window_.size());
  return piece;
}

std::string TextStream::Finish() {
  std::string piece = Send(Decode(0, window_.size()));
  window_.clear();
  Restart("");
  return piece;
}

}  // namespace attnserve
