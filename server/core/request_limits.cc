#include "server/core/request_limits.h"

#include "absl/strings/str_cat.h"
#include "server/core/engine_sizing.h"

namespace attnserve::server {

RequestLimits::RequestLimits(std::string name, const Model& model, const EngineLoopOptions& options,
                             int64_t kv_cache_tokens, KvBlockShape kv_block_shape,
                             ServerMetrics& metrics)
    : name_(std::move(name)),
      model_(&model),
      options_(options),
      kv_cache_tokens_(kv_cache_tokens),
      kv_block_shape_(kv_block_shape),
      metrics_(metrics) {}

absl::Status RequestLimits::Refuse(const char* budget, absl::Status status) const {
  Count(budget);
  return status;
}

void RequestLimits::Count(const char* budget) const {
  metrics_.refused.Add({{"model", name_}, {"budget", budget}}).Increment();
}

absl::Status RequestLimits::CheckFits(const Task& task, const RequestCost& cost) const {
  if (cost.response_bytes > options_.max_response_bytes) {
    return Refuse("response_bytes",
                  absl::ResourceExhaustedError(absl::StrCat(
                      "the answer would take up to ", cost.response_bytes,
                      " bytes, over the message limit of ", options_.max_response_bytes,
                      " (--max_message_bytes); ask for fewer sequences, tokens or values")));
  }
  if (task.kind == TaskKind::kGenerate) {
    // An encoder-decoder's source takes blocks too (Generation::source_blocks).
    const int64_t source_tokens = model_->servable->takes_sources()
                                      ? static_cast<int64_t>(task.generate().sources[0].size())
                                      : 0;
    const int64_t needed = kv_cache_tokens_ > 0 ? (kv_block_shape_.BlocksFor(cost.context_tokens) +
                                                   kv_block_shape_.BlocksFor(source_tokens)) *
                                                      kv_block_shape_.block_tokens
                                                : 0;
    if (needed > kv_cache_tokens_) {
      return Refuse("kv_cache",
                    absl::ResourceExhaustedError(absl::StrCat(
                        "the ", model_->servable->takes_sources() ? "source, prompt" : "prompt",
                        " and max_tokens need ", needed, " tokens of KV cache; model ", name_,
                        " has ", kv_cache_tokens_)));
    }
    return absl::OkStatus();
  }
  if (cost.tokens > options_.max_batch_tokens) {
    const std::string how =
        cost.passes > 1
            ? absl::StrCat(cost.call.batch, " sequences in ", cost.passes,
                           " groups of similar length, each padded to its longest")
            : absl::StrCat(cost.call.batch, " sequences padded to the longest, ", cost.call.time);
    return Refuse("tokens", absl::InvalidArgumentError(absl::StrCat(
                                "the request has ", cost.tokens, " tokens (", how, "); model ",
                                name_, " takes at most ", options_.max_batch_tokens,
                                " per request (--max_batch_tokens); split it")));
  }
  if (cost.activation_bytes > options_.budget.activation_bytes) {
    return Refuse("activation_memory",
                  absl::ResourceExhaustedError(
                      absl::StrCat("the request needs about ", Megabytes(cost.activation_bytes),
                                   " of working memory; model ", name_, " has ",
                                   Megabytes(options_.budget.activation_bytes),
                                   " per engine call; send fewer or shorter sequences")));
  }
  if (cost.response_bytes > options_.budget.response_bytes) {
    return Refuse(
        "response_bytes",
        absl::ResourceExhaustedError(absl::StrCat(
            "the answer would take up to ", Megabytes(cost.response_bytes), "; model ", name_,
            " holds at most ", Megabytes(options_.budget.response_bytes), " of answers")));
  }
  return absl::OkStatus();
}

}  // namespace attnserve::server
