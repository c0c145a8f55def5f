// Numerically stable softmax over the first `valid` entries of a row; the rest are masked.
#pragma once

#include <cstdint>

namespace attnserve {

// row[0, valid) becomes softmax(row[0, valid)); row[valid, width) becomes 0.
void MaskedSoftmaxRow(float* row, int64_t valid, int64_t width);
// row[0, valid) becomes log_softmax(row[0, valid)); row[valid, width) becomes -inf.
void MaskedLogSoftmaxRow(float* row, int64_t valid, int64_t width);

}  // namespace attnserve
