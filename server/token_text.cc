#include "server/token_text.h"

#include "absl/strings/str_format.h"

namespace attnserve::server {
namespace {

// Length of the UTF-8 sequence a lead byte starts; 0 for a byte that cannot lead.
int SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 0;
}

}  // namespace

std::string DisplayText(const ByteTokenizer& tokenizer, int64_t id) {
  if (id >= 0 && id < 256) {
    if (id < 0x80) return std::string(1, static_cast<char>(id));
    return absl::StrFormat("<0x%02X>", id);
  }
  auto text = tokenizer.TokenText(id);
  return text.ok() ? *text : absl::StrFormat("<%d>", id);
}

std::string Utf8Stream::Push(int64_t id) {
  if (id >= 256) {  // a special token ends any partial character
    std::string out = SanitizeUtf8(pending_) + DisplayText(*tokenizer_, id);
    pending_.clear();
    return out;
  }
  const char byte = static_cast<char>(id);
  bytes_.push_back(byte);
  std::string out;
  // A byte that cannot continue the pending character ends it as invalid, and then starts
  // afresh: it may lead a character of its own (found by tests/fuzz/tokenizer_fuzz).
  if (!pending_.empty() && (static_cast<unsigned char>(byte) & 0xC0) != 0x80) {
    out = SanitizeUtf8(pending_);
    pending_.clear();
  }
  pending_.push_back(byte);
  const int needed = SequenceLength(static_cast<unsigned char>(pending_[0]));
  if (needed == 0 || static_cast<int>(pending_.size()) >= needed) {
    out += SanitizeUtf8(pending_);
    pending_.clear();
  }
  return out;
}

}  // namespace attnserve::server
