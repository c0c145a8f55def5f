#include "server/core/engine_sizing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/architectures/activation_memory.h"

namespace attnserve::server {

std::string Megabytes(int64_t bytes) {
  return absl::StrCat(bytes / (1 << 20), ".", (bytes % (1 << 20)) * 10 / (1 << 20), " MiB");
}

KvCacheType KvCacheTypeFor(const EngineLoopOptions& options, const ModelConfig& config) {
  if (options.kv_cache) return *options.kv_cache;
  return config.weights.quantized ? KvCacheType::kF16 : KvCacheType::kFloat32;
}

absl::StatusOr<EngineSizing> SizeEngine(const std::string& name, const Model& model,
                                        EngineLoopOptions options) {
  const ModelConfig& config = model.config;
  // The most tokens one engine call may take: what the activation budget holds for one
  // sequence (the cheapest shape per token), at most the configured figure.
  int64_t fit = 0;
  for (int64_t step = int64_t{1} << 20; step > 0; step /= 2) {
    EngineCall call{.batch = 1, .time = fit + step, .logits_rows = 1};
    if (ActivationBytes(config, call) <= options.budget.activation_bytes) fit += step;
  }
  options.max_batch_tokens = std::min(options.max_batch_tokens, fit);
  options.step_tokens = std::clamp<int64_t>(options.step_tokens, 1, options.max_batch_tokens);
  options.prefill_chunk_tokens =
      std::clamp<int64_t>(options.prefill_chunk_tokens, 1, options.step_tokens);
  const int64_t context = config.token_inputs() ? config.max_positions : 1;
  if (options.max_batch_tokens < context) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model ", name, ": ", options.max_batch_tokens,
        " tokens per engine call are fewer than its context of ", context, "; ",
        fit < context
            ? absl::StrCat("its activation budget of ", Megabytes(options.budget.activation_bytes),
                           " holds ", fit, ": raise --memory_limit_mb")
            : "raise --max_batch_tokens"));
  }
  const ServableModel& servable = *model.servable;
  std::optional<KvBlockShape> shape = servable.Answers(ModelMethod::kGenerate)
                                          ? servable.CacheShape(options.kv_block_tokens)
                                          : std::nullopt;
  if (shape) shape->type = KvCacheTypeFor(options, config);
  std::unique_ptr<KvBlockPool> pool;
  if (shape) {
    const int64_t blocks = options.budget.kv_cache_bytes / shape->BlockBytes();
    // An encoder-decoder's source and target each take up to the context.
    const int64_t context_blocks =
        shape->BlocksFor(config.max_positions) * (servable.takes_sources() ? 2 : 1);
    if (blocks < context_blocks) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "model ", name, ": its KV cache budget of ", Megabytes(options.budget.kv_cache_bytes),
          " holds ", blocks * shape->block_tokens, " tokens, fewer than the ",
          context_blocks * shape->block_tokens, " of its context; raise --memory_limit_mb"));
    }
    // Prefixes nobody holds are kept up to --prefix_cache_tokens and a quarter of the pool, so
    // that the pool's resident part follows the work in flight rather than every prefix seen.
    const int64_t cached_blocks = std::min(
        blocks / 4, options.prefix_cache_tokens / std::max<int64_t>(1, shape->block_tokens));
    ASSIGN_OR_RETURN(auto created, KvBlockPool::Create(*shape, blocks, cached_blocks));
    pool = std::move(created);
  }
  return EngineSizing{options, std::move(pool)};
}

}  // namespace attnserve::server
