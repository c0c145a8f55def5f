#include "engine/tokenizer/text_stream.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace attnserve {
namespace {

// Prompt tokens decoded again for context: enough for any decoder.
constexpr size_t kContextTokens = 4;
// An incomplete character gives at most 3 replacements (one per byte).
constexpr size_t kMaxHeldReplacements = 3;
// Tokens held back while the decoder changes text already sent; then what differs is sent.
constexpr size_t kMaxHeldTokens = 16;
constexpr char kReplacement[] = "\xEF\xBF\xBD";
constexpr size_t kReplacementBytes = 3;

// The length of the longest common prefix of a and b that ends on a character boundary.
size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  while (n > 0 && n < a.size() && (static_cast<uint8_t>(a[n]) & 0xC0) == 0x80) --n;
  return n;
}

// Bytes of the trailing U+FFFDs that may yet become a character.
size_t HeldBytes(const std::string& text) {
  size_t held = 0;
  while (held < kMaxHeldReplacements * kReplacementBytes &&
         absl::EndsWith(absl::string_view(text.data(), text.size() - held), kReplacement)) {
    held += kReplacementBytes;
  }
  return held;
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

std::string TextStream::Send(const std::string& now, size_t end) {
  std::string piece;
  if (absl::StartsWith(now, sent_)) {
    if (end > sent_.size()) piece = now.substr(sent_.size(), end - sent_.size());
  } else {
    const size_t common = std::min(CommonPrefix(now, sent_), end);  // the decoder changed it
    piece = now.substr(common, end - common);
  }
  text_ += piece;
  sent_ = now.substr(0, std::max(end, sent_.size()));
  return piece;
}

std::string TextStream::Push(int64_t id) {
  window_.push_back(id);
  const std::string now = Decode();
  const size_t unsent_tokens = window_.size() - context_tokens_;
  if (!absl::StartsWith(now, sent_) && unsent_tokens < kMaxHeldTokens) return "";
  const size_t held = HeldBytes(now);
  std::string piece = Send(now, now.size() - held);
  if (held == 0) {
    // Every token's text is out: they become the context of the next ones.
    window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(context_tokens_));
    Restart(Decode());
  }
  return piece;
}

std::string TextStream::Finish() {
  const std::string now = Decode();
  std::string piece = Send(now, now.size());
  window_.clear();
  Restart("");
  return piece;
}

}  // namespace attnserve
