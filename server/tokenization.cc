#include "server/tokenization.h"

#include "absl/strings/str_cat.h"

namespace attnserve::server {
namespace {

absl::Status CheckLength(const std::string& text, const std::string& field,
                         const ModelWorker& worker) {
  const int64_t limit = worker.options().max_text_bytes;
  if (static_cast<int64_t>(text.size()) > limit) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", text.size(), " bytes; at most ",
                                                   limit, " are tokenized (--max_text_bytes)"));
  }
  return absl::OkStatus();
}

absl::Status Named(const std::string& field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> EncodeText(const std::string& text, const std::string& field,
                                                const ModelWorker& worker) {
  if (auto status = CheckLength(text, field, worker); !status.ok()) return status;
  auto ids = worker.model().tokenizer->EncodeIds(text);
  if (!ids.ok()) return Named(field, ids.status());
  return ids;
}

absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request,
                                              const ModelWorker& worker) {
  if (auto status = CheckLength(request.text(), "text", worker); !status.ok()) return status;
  const Tokenizer& tokenizer = *worker.model().tokenizer;
  auto encoding = tokenizer.Encode(request.text(), !request.omit_special_tokens());
  if (!encoding.ok()) return Named("text", encoding.status());
  // Each token's message: its id, its text, its range and its flag, with their tags.
  const int64_t bound =
      static_cast<int64_t>(encoding->ids.size()) * (worker.model().max_token_text_bytes + 48);
  if (bound > worker.options().max_response_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the ", encoding->ids.size(), " tokens would take up to ", bound,
                     " bytes, over the message limit of ", worker.options().max_response_bytes,
                     " (--max_message_bytes); send a shorter text"));
  }
  v1::TokenizeResponse response;
  response.mutable_tokens()->Reserve(static_cast<int>(encoding->ids.size()));
  for (size_t i = 0; i < encoding->ids.size(); ++i) {
    v1::Token* token = response.add_tokens();
    token->set_id(encoding->ids[i]);
    // The byte tokenizer's tokens are bytes; tokenizer.json's are the vocabulary's strings.
    token->set_text(tokenizer.type() == "byte" ? tokenizer.TokenText(encoding->ids[i])
                                               : std::move(encoding->tokens[i]));
    token->set_start(static_cast<int64_t>(encoding->offsets[i].begin));
    token->set_end(static_cast<int64_t>(encoding->offsets[i].end));
    token->set_special(encoding->special[i] != 0);
  }
  return response;
}

absl::StatusOr<v1::DetokenizeResponse> Detokenize(const v1::DetokenizeRequest& request,
                                                  const ModelWorker& worker) {
  const int64_t vocab = worker.model().config.vocab_size;
  std::vector<int64_t> ids(request.ids().begin(), request.ids().end());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("ids[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  auto text = worker.model().tokenizer->Decode(ids, request.skip_special_tokens());
  if (!text.ok()) return Named("ids", text.status());
  v1::DetokenizeResponse response;
  response.set_text(*std::move(text));
  return response;
}

}  // namespace attnserve::server
