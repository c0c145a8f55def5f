// A batch of sequences of different lengths, stored padded: values [batch, time, width] and the
// true length of each sequence. Rows past a sequence's length are padding: kernels never read
// them and write zeros there.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/tensor.h"

namespace attnserve {

struct PaddedBatch {
  Tensor values;
  std::vector<int64_t> lengths;

  int64_t batch() const { return values.dim(0); }
  int64_t time() const { return values.dim(1); }
  int64_t width() const { return values.dim(2); }
};

// Checks rank, width (when expected_width > 0), dense rows and 0 <= lengths[b] <= time; the
// message names `what`.
absl::Status CheckPaddedBatch(absl::string_view what, const PaddedBatch& batch,
                              int64_t expected_width);

// `rows` [k, width] repeated for every sequence of a batch: [batch, k, width], all of length k
// (learned latents, inducing points, seeds, output queries).
PaddedBatch RepeatForBatch(const Tensor& rows, int64_t batch);

// The last row of every sequence: [batch, width] (sequences must not be empty).
Tensor LastRows(const PaddedBatch& x);

// Zeros rows t >= lengths[b] of a [batch, time, width] tensor.
void ZeroPadding(Tensor& values, const std::vector<int64_t>& lengths);

}  // namespace attnserve
