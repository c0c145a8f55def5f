// Streamed text of generated tokens, for any tokenizer: each piece is valid UTF-8 and ends on a
// character boundary, and the pieces add up to the decoded text. A byte-level or byte-fallback
// token can be part of a character: the tokens of an incomplete last character are held back
// until it is whole (Tokenizer::IncompleteCharacterTokens). Each step decodes the tokens since the
// last text sent, after the tokens of that text for context, so that a decoder that depends on the
// token before (a space between WordPiece words, SentencePiece's leading ▁) sees it. Tokens are
// also held while the decoder changes text already sent, up to 16: ByteFallback reads a whole run
// of byte tokens at once and turns all of it into U+FFFDs once it is not UTF-8, so a model that
// spells a character in byte tokens and then a stray byte may stream other U+FFFDs than its
// decoding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace attnserve {

class TextStream {
 public:
  // Tokens held back at most: a piece holds the text of at most this many.
  static constexpr size_t kMaxHeldTokens = 16;

  // `prompt`: the tokens before the generated ones; the last few give the first ones context.
  TextStream(const Tokenizer& tokenizer, const std::vector<int64_t>& prompt);

  // The text that token `id` completes (possibly empty).
  std::string Push(int64_t id);
  // What is held back at the end (an incomplete character, as U+FFFD).
  std::string Finish();
  // Every piece so far, concatenated (for stop sequences).
  const std::string& text() const { return text_; }

 private:
  // The text of window_[begin, end).
  std::string Decode(size_t begin, size_t end) const;
  // Sends what `text`, that of the window's first `tokens` tokens, has beyond what was sent;
  // those tokens become the context of the rest.
  std::string Send(const std::string& text, size_t tokens);

  const Tokenizer* tokenizer_;  // a pointer, so that streams can be moved
  std::vector<int64_t> window_;
  size_t context_tokens_ = 0;  // the window's first tokens, sent before; decoded for context
  std::string sent_;           // the window's text that was sent (or is context)
  std::string text_;
};

}  // namespace attnserve
