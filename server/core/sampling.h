// Choosing a generation's next token from the model's logits.
#pragma once

#include <cstdint>
#include <random>

#include "server/core/task.h"

namespace attnserve::server {

// log Σ exp(x), stably.
float LogSumExp(const float* x, int64_t n);

// Draws a token from logits with temperature, top-k and top-p; greedy at temperature 0.
int64_t Sample(const float* logits, int64_t vocab, const GenerateOptions& options,
               std::mt19937_64& rng);

}  // namespace attnserve::server
