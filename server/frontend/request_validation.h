// Turns a method's input, from whichever protocol, into a validated task. Every refusal is
// INVALID_ARGUMENT with a message naming the field in the protocol's words (e.g.
// "sequences[2].tokens.ids[5] = 300 is outside the vocabulary [0, 257)"), so kernels behind the
// scheduler never see a malformed input.
#pragma once

#include "absl/status/status.h"
#include "server/core/engine_loop.h"
#include "server/core/task.h"
#include "server/frontend/method_inputs.h"

namespace attnserve::server {

// Sequences (or feature sets) one request may hold.
inline constexpr int kMaxSequences = 256;
// Texts or pairs one Classify may hold (a rerank's documents: Cohere's API takes 1,000).
inline constexpr int kMaxClassifyItems = 1000;
// Stop sequences one Generate may hold.
inline constexpr int kMaxStopSequences = 16;

absl::Status ValidateNextToken(const NextTokenInput& input, const FieldNames& names,
                               const EngineLoop& worker, Task& task);
absl::Status ValidateScore(const ScoreInput& input, const FieldNames& names,
                           const EngineLoop& worker, Task& task);
absl::Status ValidateEmbed(const EmbedInput& input, const FieldNames& names,
                           const EngineLoop& worker, Task& task);
absl::Status ValidateClassify(const ClassifyInput& input, const FieldNames& names,
                              const EngineLoop& worker, Task& task);
absl::Status ValidateGenerate(const GenerateInput& input, const FieldNames& names,
                              const EngineLoop& worker, Task& task);

}  // namespace attnserve::server
