// One Generate request in the scheduler: its tokens, its cache, its sampler and its text. A
// generation feeds the tokens its cache has not seen yet (the prompt in chunks; then each
// sampled token; all of them again after a preemption) and samples once it has fed them all.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/models/causal_lm.h"
#include "engine/models/servable_model.h"
#include "engine/tokenizer/text_stream.h"
#include "server/task.h"

namespace attnserve::server {

struct Generation {
  Generation(std::shared_ptr<Task> task, const Tokenizer& tokenizer)
      : task(std::move(task)),
        rng(this->task->generate.seed),
        text(tokenizer, this->task->sequences[0]) {
    tokens = this->task->sequences[0];
    prompt_tokens = static_cast<int64_t>(tokens.size());
  }

  DecoderState& decoder() { return state->decoder(); }
  // An encoder-decoder preempted: its encoded source was dropped too, to be encoded again.
  bool source_dropped() const { return state->source_dropped(); }
  int64_t held_blocks() {
    return static_cast<int64_t>(decoder().table.blocks().size() +
                                (source_blocks ? source_blocks->blocks().size() : 0));
  }
  // Tokens to feed before the next sample.
  int64_t unfed() { return static_cast<int64_t>(tokens.size()) - decoder().position; }

  std::shared_ptr<Task> task;
  std::unique_ptr<GenerationState> state;
  // Encoder-decoders: pool blocks held for as long as the encoded source's keys and values
  // (kept by the engine, as many bytes) are, so that the KV cache's share bounds them too.
  std::unique_ptr<BlockTable> source_blocks;
  std::mt19937_64 rng;
  TextStream text;
  std::vector<int64_t> tokens;  // the prompt, then every token sent
  int64_t prompt_tokens = 0, generated = 0;
};

}  // namespace attnserve::server
