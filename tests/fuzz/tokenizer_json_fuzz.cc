// libFuzzer target: arbitrary bytes as a tokenizer.json. Loading either refuses it with an error
// that names the file, or gives a tokenizer that encodes and decodes a few texts with every
// output valid UTF-8 and every token's range inside the text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "text/tokenizer/hf_tokenizer.h"
#include "text/tokenizer/unicode.h"

namespace {

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "tokenizer_json_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = attnserve::HfTokenizer::FromJson(json, "fuzz/tokenizer.json");
  if (!tokenizer.ok()) {
    Require(absl::StartsWith(tokenizer.status().message(), "fuzz/tokenizer.json: "),
            "a load error does not name the file");
    return 0;
  }
  for (const std::string text :
       {"", " ", "Hello, world! 123", "naïve café ﬁ 中文 😀👍🏽",
        "  tabs\tand\nlines  ", "<s>[CLS]<unk> added?"}) {
    auto encoding = tokenizer->Encode(text);
    if (!encoding.ok()) continue;  // e.g. a Unigram model without an unknown token
    Require(encoding->ids.size() == encoding->offsets.size(), "ids and offsets differ in count");
    for (const attnserve::ByteRange& range : encoding->offsets) {
      Require(range.begin <= range.end && range.end <= text.size(),
              "a token's range is outside the text");
    }
    for (const std::string& token : encoding->tokens) {
      Require(attnserve::unicode::IsValidUtf8(token), "a token is invalid UTF-8");
    }
    for (bool skip : {false, true}) {
      auto decoded = tokenizer->Decode(encoding->ids, skip);
      Require(decoded.ok() && attnserve::unicode::IsValidUtf8(*decoded),
              "decoded text is invalid UTF-8");
    }
  }
  return 0;
}
