#include "server/frontend/tokenization.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace attnserve::server {
namespace {

using Field = FieldPath::Field;

absl::Status CheckLength(const std::string& text, const FieldPath& path, const FieldNames& names,
                         const EngineLoop& worker) {
  const int64_t limit = worker.options().max_text_bytes;
  if (static_cast<int64_t>(text.size()) > limit) {
    return InvalidField(names, path,
                        absl::StrCat("has ", text.size(), " bytes; at most ", limit,
                                     " are tokenized (--max_text_bytes)"));
  }
  return absl::OkStatus();
}

absl::Status Named(const FieldPath& path, const FieldNames& names, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(names.Name(path), ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> EncodeText(const std::string& text, const FieldPath& path,
                                                const FieldNames& names, const EngineLoop& worker,
                                                bool add_special_tokens) {
  RETURN_IF_ERROR(CheckLength(text, path, names, worker));
  const Tokenizer& tokenizer = *worker.model().tokenizer;
  if (add_special_tokens) {
    auto ids = tokenizer.EncodeIds(text);
    if (!ids.ok()) return Named(path, names, ids.status());
    return ids;
  }
  auto encoding = tokenizer.Encode(text, /*add_special_tokens=*/false);
  if (!encoding.ok()) return Named(path, names, encoding.status());
  return std::move(encoding->ids);
}

absl::StatusOr<Encoding> EncodeInput(const std::string& text, const std::string* pair,
                                     const TextTruncation& truncation, const FieldPath& path,
                                     const FieldNames& names, const EngineLoop& worker) {
  const FieldPath first{path.field, path.row, FieldPath::Part::kText};
  RETURN_IF_ERROR(CheckLength(text, first, names, worker));
  const FieldPath second{path.field, path.row, FieldPath::Part::kPairText};
  if (pair != nullptr) RETURN_IF_ERROR(CheckLength(*pair, second, names, worker));
  const Tokenizer& tokenizer = *worker.model().tokenizer;
  Truncation cut;
  if (truncation.enabled) {
    cut = {.max_tokens = static_cast<size_t>(worker.max_context()),
           .strategy = truncation.strategy,
           .from_left = truncation.from_left};
  }
  auto encoding = pair != nullptr ? tokenizer.EncodePair(text, *pair, cut)
                                  : tokenizer.EncodeTruncated(text, cut);
  if (!encoding.ok()) return Named(pair != nullptr ? path : first, names, encoding.status());
  return encoding;
}

absl::StatusOr<std::vector<TokenSpan>> Tokenize(const TokenizeInput& input, const FieldNames& names,
                                                const EngineLoop& worker) {
  const FieldPath text{Field::kText};
  RETURN_IF_ERROR(CheckLength(input.text, text, names, worker));
  const Tokenizer& tokenizer = *worker.model().tokenizer;
  auto encoding = tokenizer.Encode(input.text, !input.omit_special_tokens);
  if (!encoding.ok()) return Named(text, names, encoding.status());
  // Each token's message: its id, its text, its range and its flag, with their tags.
  const int64_t bound =
      static_cast<int64_t>(encoding->ids.size()) * (worker.model().max_token_text_bytes + 48);
  if (bound > worker.options().max_response_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the ", encoding->ids.size(), " tokens would take up to ", bound,
                     " bytes, over the message limit of ", worker.options().max_response_bytes,
                     " (--max_message_bytes); send a shorter text"));
  }
  std::vector<TokenSpan> tokens(encoding->ids.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    TokenSpan& token = tokens[i];
    token.id = encoding->ids[i];
    // The byte tokenizer's tokens are bytes; tokenizer.json's are the vocabulary's strings.
    token.text = tokenizer.type() == "byte" ? tokenizer.TokenText(encoding->ids[i])
                                            : std::move(encoding->tokens[i]);
    token.start = static_cast<int64_t>(encoding->offsets[i].begin);
    token.end = static_cast<int64_t>(encoding->offsets[i].end);
    token.special = encoding->special[i] != 0;
  }
  return tokens;
}

absl::StatusOr<std::string> Detokenize(const DetokenizeInput& input, const FieldNames& names,
                                       const EngineLoop& worker) {
  const int64_t vocab = worker.model().config.vocab_size;
  for (size_t i = 0; i < input.ids.size(); ++i) {
    if (input.ids[i] < 0 || input.ids[i] >= vocab) {
      return InvalidField(
          names, {Field::kIds, -1, FieldPath::Part::kTokenIds, static_cast<int64_t>(i)},
          absl::StrCat("= ", input.ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  auto text = worker.model().tokenizer->Decode(input.ids, input.skip_special_tokens);
  if (!text.ok()) return Named({Field::kIds}, names, text.status());
  return text;
}

}  // namespace attnserve::server
