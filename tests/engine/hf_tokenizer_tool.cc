// Runs the engine's tokenizer for tests/engine/hf_tokenizer_reference_test.py and
// gguf_tokenizer_reference_test.py: loads a tokenizer.json, or builds one from the metadata of a
// GGUF file (a path ending in .gguf) as the engine's GGUF importer does, then for each line of
// stdin (a JSON string) prints a JSON object with the ids, tokens, byte offsets and decoded text
// (without and with the special tokens), or the error. A tokenizer that does not load: its error on
// stderr, exit code 2.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/text_stream.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: hf_tokenizer_tool TOKENIZER_JSON|MODEL_GGUF < texts.jsonl\n";
    return 1;
  }
  const std::string path = argv[1];
  absl::StatusOr<attnserve::HfTokenizer> tokenizer = absl::UnknownError("");
  if (absl::EndsWith(path, ".gguf")) {
    absl::StatusOr<attnserve::GgufFile> file = attnserve::GgufFile::Open(path);
    absl::StatusOr<std::string> json =
        file.ok() ? attnserve::TokenizerJsonFromGguf(file->metadata(), path) : file.status();
    tokenizer = json.ok() ? attnserve::HfTokenizer::FromJson(*json, path)
                          : absl::StatusOr<attnserve::HfTokenizer>(json.status());
  } else {
    tokenizer = attnserve::HfTokenizer::FromFile(path);
  }
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status().message() << "\n";
    return 2;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    const std::string text = nlohmann::json::parse(line).get<std::string>();
    const absl::StatusOr<attnserve::Encoding> encoded = tokenizer->Encode(text);
    nlohmann::json out;
    if (!encoded.ok()) {
      out["error"] = encoded.status().message();
      std::cout << out.dump() << "\n";
      continue;
    }
    const attnserve::Encoding& encoding = *encoded;
    out["ids"] = encoding.ids;
    out["tokens"] = encoding.tokens;
    out["offsets"] = nlohmann::json::array();
    for (const attnserve::ByteRange& range : encoding.offsets) {
      out["offsets"].push_back({range.begin, range.end});
    }
    out["decoded"] = *tokenizer->Decode(encoding.ids, /*skip_special_tokens=*/true);
    out["decoded_with_special"] = *tokenizer->Decode(encoding.ids, /*skip_special_tokens=*/false);
    // The ids streamed one at a time, as Generate streams them.
    attnserve::TextStream stream(*tokenizer, {});
    out["stream"] = nlohmann::json::array();
    for (int64_t id : encoding.ids) out["stream"].push_back(stream.Push(id));
    out["stream_rest"] = stream.Finish();
    std::cout << out.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace)
              << "\n";
  }
  return 0;
}
