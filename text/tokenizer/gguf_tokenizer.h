// The tokenizer a GGUF file describes (llama.cpp's tokenizer.ggml.* metadata keys), written as
// the Hugging Face tokenizer.json of the model's original tokenizer, so that HfTokenizer runs it
// as the reference library runs that file: GGUF models encode, decode and stream as tokenizer.json
// models do.
//
// Two kinds of vocabulary (tokenizer.ggml.model):
//  - "gpt2": byte-level BPE with the file's merges, ByteLevel post-processor (offsets untrimmed)
//    and decoder, no unknown token (a byte missing from the vocabulary is dropped, as llama.cpp
//    and the reference drop it). tokenizer.ggml.pre names the pre-tokenizer; only the names whose
//    llama.cpp regexes are exactly those of a tokenizer.json are supported:
//    - "gpt-2": ByteLevel with its (GPT-2's) regex.
//    - "smollm", "starcoder": Sequence[Digits individual_digits, ByteLevel].
//    - "llama3", "llama-v3", "llama-bpe": Split(Llama 3's regex) then ByteLevel without its
//      regex; the BPE ignores merges for words in the vocabulary (ignore_merges), as Llama 3's.
//    - "qwen2": Split(Qwen2's regex) then ByteLevel without its regex, after an NFC normalizer
//      (Qwen2's tokenizer.json has it; llama.cpp skips it).
//  - "llama": SentencePiece BPE with byte fallback, as the Llama 2 tokenizer.json has it:
//    normalizer Prepend "▁" (when tokenizer.ggml.add_space_prefix, default true) and Replace " "
//    by "▁"; no pre-tokenizer; BPE with byte_fallback and fuse_unk, unk_token the
//    tokenizer.ggml.unknown_token_id token (default 0); decoder Replace "▁" by " ", ByteFallback,
//    Fuse and Strip one leading space (when the prefix is added). The merges, which the file does
//    not have, are derived from tokenizer.ggml.scores as transformers' SentencePiece conversion
//    derives them: every split of a token into two tokens, ordered by the token's score
//    (descending), then the left part's length and the right part's (descending, in chars), then
//    the token's id.
//
// Added tokens: control (token type 3) and unknown (2) tokens as special added tokens,
// user-defined ones (4) as non-special ones, none normalized: matched in the raw text wherever they
// occur, as llama.cpp matches them when it parses special tokens.
//
// BOS and EOS: a TemplateProcessing post-processor adds tokenizer.ggml.bos_token_id before the
// text when tokenizer.ggml.add_bos_token says so, and tokenizer.ggml.eos_token_id after it when
// tokenizer.ggml.add_eos_token does. Absent keys take llama.cpp's defaults: add BOS for "llama"
// models and for gpt2 ones with a Llama 3 pre-tokenizer, not otherwise; never add EOS; ids BOS 1,
// EOS 2 and unknown 0 for "llama" models (none for gpt2 ones). The JSON does not say which ids end
// generation: that is the caller's to read (tokenizer.ggml.eos_token_id, eot_token_id,
// eom_token_id).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace attnserve {

// A tokenizer.json (as text, for HfTokenizer::FromJson) equivalent to the tokenizer that a GGUF
// file's metadata describes; `path` names the file in errors, which also name the key (and the
// index of an array's element). Refused: unsupported models and pre-tokenizers, values of the
// wrong type, arrays of mismatched lengths, ids outside the vocabulary, duplicate or invalid UTF-8
// tokens, merges naming tokens that do not exist.
absl::StatusOr<std::string> TokenizerJsonFromGguf(const nlohmann::json& metadata,
                                                  const std::string& path);

}  // namespace attnserve
