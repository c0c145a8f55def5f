#include "engine/tokenizer/text_stream.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace attnserve {
namespace {

// Prompt tokens decoded again for context: enough for any decoder.
constexpr size_t kContextTokens = 4;
// Tokens held back at most: past this, text that still ends in U+FFFD (or that the decoder
// changed) is sent as it is, so that a piece stays short and the window small.
constexpr size_t kMaxHeldTokens = 16;
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
  const std::string text = Decode();
  if (absl::EndsWith(text, kReplacement)) {
    window_.clear();
    Restart("");
  } else {
    Restart(text);
  }
}

std::string TextStream::Decode() const {
  auto text = tokenizer_->Decode(window_);
  return text.ok() ? *std::move(text) : std::string();
}

void TextStream::Restart(const std::string& now) {
  context_tokens_ = window_.size();
  sent_ = now;
}

std::string TextStream::Send(const std::string& now) {
  const size_t from = absl::StartsWith(now, sent_) ? sent_.size() : CommonPrefix(now, sent_);
  std::string piece = now.substr(from);
  text_ += piece;
  return piece;
}

std::string TextStream::Push(int64_t id) {
  window_.push_back(id);
  const std::string now = Decode();
  // Held back while the text ends in U+FFFD (a character still to complete: ByteLevel and the
  // byte tokenizer replace an incomplete one by U+FFFD, ByteFallback a whole run of bytes with
  // one in it by one U+FFFD per byte) or while the decoder changes text already sent.
  const bool settled = absl::StartsWith(now, sent_) && !absl::EndsWith(now, kReplacement);
  if (!settled && window_.size() - context_tokens_ < kMaxHeldTokens) return "";
  if (now.size() <= sent_.size() && settled) return "";
  std::string piece = Send(now);
  // Every token's text is out: they become the context of the next ones.
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(context_tokens_));
  Restart(Decode());
  return piece;
}

std::string TextStream::Finish() {
  std::string piece = Send(Decode());
  window_.clear();
  Restart("");
  return piece;
}

}  // namespace attnserve
