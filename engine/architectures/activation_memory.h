// What one engine call allocates at its peak, from the model's sizes alone: the server admits
// work by it, before running anything (docs/serving.md). Generous rather than tight: a layer's
// attention and feed-forward temporaries added together, the packed keys and values of
// everything a query attends to, the logits, plus a quarter. tests/engine/
// activation_memory_test holds it above the measured tensor peak (TensorPeakBytes) of every
// architecture, and within 4 times it (2.5 for the demo model).
#pragma once

#include <cstdint>

#include "engine/importers/model_config.h"

namespace attnserve {

struct EngineCall {
  int64_t batch = 0;
  int64_t time = 0;         // the longest sequence's new tokens (or feature rows): batches pad
  int64_t cached = 0;       // the most tokens a sequence had cached before them
  int64_t source_time = 0;  // encoder-decoders: the longest source
  int64_t logits_rows = 0;  // rows of vocabulary logits returned (B, or B·T for Score)
  int64_t head_layers = 0;  // Embed: layers whose per-head contributions are returned
};

int64_t ActivationBytes(const ModelConfig& config, const EngineCall& call);

// One engine call for two calls of the same kind batched together.
EngineCall Merge(const EngineCall& a, const EngineCall& b);

}  // namespace attnserve
