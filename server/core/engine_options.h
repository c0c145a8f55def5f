// How one model's engine loop batches, schedules and budgets its work: the server's flags,
// overridden per model by its directory's serving.json (server/frontend/model_repository.h).
#pragma once

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "engine/architectures/model.h"
#include "server/core/answer_writer.h"
#include "server/core/memory_budget.h"

namespace attnserve::server {

struct EngineLoopOptions {
  int64_t max_batch_size = 32;  // sequences decoding at once; requests per batch
  absl::Duration max_queue_delay = absl::ZeroDuration();
  int64_t max_queue_size = 256;
  int compute_threads = 1;  // OpenMP threads of this model's engine calls
  // How long the idle scheduler polls for new work before sleeping: a request arriving within
  // it starts without a futex wake-up (about 100 µs on these machines).
  absl::Duration idle_spin = absl::Microseconds(300);
  // Tokens per engine call, and so per unary request (TEI's name). Lowered at start to what
  // the model's activation budget holds.
  int64_t max_batch_tokens = 16384;
  // Tokens a step puts through the engine (vLLM's max_num_batched_tokens), prompt chunks and
  // unary requests together; a unary request larger than this runs alone. Larger steps cost
  // more per token once their activations leave the cache (docs/benchmarks.md).
  int64_t step_tokens = 2048;
  // The step's budget instead while generations decode, so their next token waits for little,
  // and what pacing sizes it by: the step's other work takes about this many times its decode
  // call (server/core/prefill_pacing.h; 0: always prefill_chunk_tokens).
  int64_t prefill_chunk_tokens = 256;
  double prefill_pacing = 1.3;
  int64_t kv_block_tokens = 32;
  // Tokens of finished sequences' prefixes kept for reuse (whole blocks; at most a quarter of the
  // pool): enough for the system prompts and recent conversations a chat server sees again, and
  // a bound that follows the model's KV size rather than the machine's memory.
  int64_t prefix_cache_tokens = 8192;
  int64_t max_response_bytes = 16 << 20;  // gRPC's message limit
  // The longest text one sequence may have: tokenizing takes memory in proportion to it.
  int64_t max_text_bytes = 256 << 10;
  // A Generate stream with this many events unsent is paused until its client reads.
  int64_t max_unsent_events = 4;
  // How the model writes tool calls (tool_calls::FormatNamed's names); empty: as its chat
  // template shows (serving.json's tool_call_format).
  std::string tool_call_format;
  // A Jinja file in the model's directory that replaces its default chat template
  // (serving.json's chat_template), e.g. one that shows the model tools.
  std::string chat_template_file;
  ModelBudget budget{int64_t{256} << 20, int64_t{512} << 20, int64_t{256} << 20};
  // How the model keeps its linear layers' weights: float32, or int8 quantized at load.
  WeightFormat weights;
  // How its KV cache keeps keys and values; unset (auto): half precision for int8 weights,
  // float32 for float32 weights (whose users asked for float32 arithmetic).
  std::optional<KvCacheType> kv_cache;
  // The thread that delivers streamed generations' events and every step's endings (null: the
  // engine loop's own). It must outlive the loop.
  AnswerWriter* answers = nullptr;
};

// The KV cache type `options` choose for a model of `config`.
KvCacheType KvCacheTypeFor(const EngineLoopOptions& options, const ModelConfig& config);

}  // namespace attnserve::server
