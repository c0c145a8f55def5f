// Streamed text of generated tokens, for any tokenizer: each piece is valid UTF-8 and ends on a
// character boundary, and the pieces add up to the decoded text. A byte-level or byte-fallback
// token can be part of a character: the decoded text then ends in U+FFFD, and the tokens are
// held back until the character is whole (at most 16 tokens; past that, what there is is sent).
// Each step decodes the tokens since the last text sent, after the tokens of that text for
// context, so that a decoder that depends on the token before (a space between WordPiece words,
// SentencePiece's leading ▁) sees it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace attnserve {

class TextStream {
 public:
  // `prompt`: the tokens before the generated ones; the last few give the first ones context.
  TextStream(const Tokenizer& tokenizer, const std::vector<int64_t>& prompt);

  // The text that token `id` completes (possibly empty).
  std::string Push(int64_t id);
  // What is held back at the end (an incomplete character, as U+FFFD).
  std::string Finish();
  // Every piece so far, concatenated (for stop sequences).
  const std::string& text() const { return text_; }

 private:
  std::string Decode() const;
  // Sends what `now` (the window's text) has beyond what was sent.
  std::string Send(const std::string& now);
  // Makes the window's tokens the context of the next ones.
  void Restart(const std::string& now);

  const Tokenizer* tokenizer_;  // a pointer, so that streams can be moved
  std::vector<int64_t> window_;
  size_t context_tokens_ = 0;  // the window's first tokens, sent before; decoded for context
  std::string sent_;           // the window's text that was sent (or is context)
  std::string text_;
};

}  // namespace attnserve
