// Turns request messages into validated engine inputs. Every refusal is INVALID_ARGUMENT with a
// message naming the field (e.g. "sequences[2].tokens.ids[5] = 300 is outside the vocabulary
// [0, 257)"), so kernels behind the scheduler never see a malformed input.
#pragma once

#include "absl/status/status.h"
#include "proto/attnserve/v1/inference.pb.h"
#include "server/model_worker.h"
#include "server/task.h"

namespace attnserve::server {

// Sequences (or feature sets) one request may hold.
inline constexpr int kMaxSequences = 256;
// Stop sequences one Generate may hold.
inline constexpr int kMaxStopSequences = 16;

absl::Status ValidateNextToken(const v1::NextTokenRequest& request, const ModelWorker& worker,
                               Task& task);
absl::Status ValidateScore(const v1::ScoreRequest& request, const ModelWorker& worker, Task& task);
absl::Status ValidateEmbed(const v1::EmbedRequest& request, const ModelWorker& worker, Task& task);
absl::Status ValidateGenerate(const v1::GenerateRequest& request, const ModelWorker& worker,
                              Task& task);

}  // namespace attnserve::server
