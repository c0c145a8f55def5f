// Runs the engine's tokenizer for tests/engine/hf_tokenizer_reference_test.py and
// gguf_tokenizer_reference_test.py: loads a tokenizer.json, or builds one from the metadata of a
// GGUF file (a path ending in .gguf) as the engine's GGUF importer does, then for each line of
// stdin (a JSON string) prints a JSON object with the ids, tokens, byte offsets and decoded text
// (without and with the special tokens), or the error. A tokenizer that does not load: its error on
// stderr, exit code 2.
// A line holding an object instead, {"texts": [text] or [first, second], "max_tokens": N,
// "strategy": "longest_first" | "only_first" | "only_second", "direction": "right" | "left"},
// is encoded as one text or a pair with that truncation: {"ids", "tokens", "type_ids", "offsets"
// (in each token's own text)} or {"error"}.
// With --components instead of a file: each line of stdin is a JSON object {"normalizer": ...,
// "pre_tokenizer": ..., "texts": [...]} (the components as tokenizer.json has them, null for
// none), and the answer a line {"normalized": [...], "pieces": [[...], ...]}: per text, the
// normalized text and the normalized text's pre-tokenized words, or {"error": ...}.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "engine/gguf/gguf_file.h"
#include "text/tokenizer/gguf_tokenizer.h"
#include "text/tokenizer/hf_tokenizer.h"
#include "text/tokenizer/normalizers.h"
#include "text/tokenizer/pre_tokenizers.h"
#include "text/tokenizer/text_stream.h"

namespace {

void Print(const nlohmann::json& out, bool ensure_ascii = true) {
  std::cout << out.dump(-1, ' ', ensure_ascii, nlohmann::json::error_handler_t::replace) << "\n";
}

// The answer to one --components request (see the top of this file).
nlohmann::json RunComponents(const nlohmann::json& request) {
  absl::StatusOr<std::unique_ptr<attnserve::Normalizer>> normalizer =
      attnserve::NormalizerFromJson(request.value("normalizer", nlohmann::json()));
  absl::StatusOr<std::unique_ptr<attnserve::PreTokenizer>> pre_tokenizer =
      attnserve::PreTokenizerFromJson(request.value("pre_tokenizer", nlohmann::json()));
  for (const absl::Status& status : {normalizer.status(), pre_tokenizer.status()}) {
    if (!status.ok()) return {{"error", status.message()}};
  }
  nlohmann::json out = {{"normalized", nlohmann::json::array()},
                        {"pieces", nlohmann::json::array()}};
  for (const nlohmann::json& text : request.at("texts")) {
    attnserve::NormalizedText normalized(text.get<std::string>());
    if (*normalizer) (*normalizer)->Apply(normalized);
    out["normalized"].push_back(normalized.normalized());
    std::vector<attnserve::TextSplit> splits;
    splits.push_back({attnserve::NormalizedText(normalized.normalized()), std::nullopt});
    if (*pre_tokenizer) (*pre_tokenizer)->Apply(splits);
    nlohmann::json pieces = nlohmann::json::array();
    for (const attnserve::TextSplit& split : splits) pieces.push_back(split.text.normalized());
    out["pieces"].push_back(std::move(pieces));
  }
  return out;
}

// The answer to a request for one text or a pair, cut (see the top of this file).
nlohmann::json RunTruncated(const attnserve::Tokenizer& tokenizer, const nlohmann::json& request) {
  attnserve::Truncation truncation;
  truncation.max_tokens = request.value("max_tokens", 0);
  const std::string strategy = request.value("strategy", "longest_first");
  truncation.strategy = strategy == "only_first" ? attnserve::Truncation::Strategy::kOnlyFirst
                        : strategy == "only_second"
                            ? attnserve::Truncation::Strategy::kOnlySecond
                            : attnserve::Truncation::Strategy::kLongestFirst;
  truncation.from_left = request.value("direction", "right") == "left";
  const nlohmann::json& texts = request.at("texts");
  const absl::StatusOr<attnserve::Encoding> encoded =
      texts.size() == 1 ? tokenizer.EncodeTruncated(texts[0].get<std::string>(), truncation)
                        : tokenizer.EncodePair(texts[0].get<std::string>(),
                                               texts[1].get<std::string>(), truncation);
  if (!encoded.ok()) return {{"error", encoded.status().message()}};
  nlohmann::json out = {{"ids", encoded->ids},
                        {"tokens", encoded->tokens},
                        {"type_ids", encoded->type_ids},
                        {"offsets", nlohmann::json::array()}};
  for (const attnserve::ByteRange& range : encoded->offsets) {
    out["offsets"].push_back({range.begin, range.end});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: hf_tokenizer_tool TOKENIZER_JSON|MODEL_GGUF|--components < input.jsonl\n";
    return 1;
  }
  const std::string path = argv[1];
  if (path == "--components") {
    std::string line;
    // UTF-8 rather than \u escapes: the answers to every code point are large.
    while (std::getline(std::cin, line)) {
      Print(RunComponents(nlohmann::json::parse(line)), /*ensure_ascii=*/false);
    }
    return 0;
  }
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
    const nlohmann::json request = nlohmann::json::parse(line);
    if (request.is_object()) {
      Print(RunTruncated(*tokenizer, request));
      continue;
    }
    const std::string text = request.get<std::string>();
    const absl::StatusOr<attnserve::Encoding> encoded = tokenizer->Encode(text);
    nlohmann::json out;
    if (!encoded.ok()) {
      out["error"] = encoded.status().message();
      Print(out);
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
    // The bytes each token adds to a text, joined: what constrained decoding matches.
    std::string token_bytes;
    for (int64_t id : encoding.ids) token_bytes += tokenizer->TokenBytes(id).value_or("");
    out["token_bytes"] = token_bytes;
    // The ids streamed one at a time, as Generate streams them.
    attnserve::TextStream stream(*tokenizer, {});
    out["stream"] = nlohmann::json::array();
    for (int64_t id : encoding.ids) out["stream"].push_back(stream.Push(id));
    out["stream_rest"] = stream.Finish();
    Print(out);
  }
  return 0;
}
