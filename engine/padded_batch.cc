#include "engine/padded_batch.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attnserve {

absl::Status CheckPaddedBatch(absl::string_view what, const PaddedBatch& batch,
                              int64_t expected_width) {
  const Tensor& values = batch.values;
  if (values.rank() != 3 || values.stride(2) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a [batch, time, width] tensor with dense rows, got ",
                     values.ShapeString()));
  }
  if (expected_width > 0 && values.dim(2) != expected_width) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has width ", values.dim(2), ", expected ", expected_width));
  }
  if (static_cast<int64_t>(batch.lengths.size()) != values.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", batch.lengths.size(),
                                                   " lengths for a batch of ", values.dim(0)));
  }
  for (size_t b = 0; b < batch.lengths.size(); ++b) {
    if (batch.lengths[b] < 0 || batch.lengths[b] > values.dim(1)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " sequence ", b, " has length ",
                                                     batch.lengths[b], ", outside [0, ",
                                                     values.dim(1), "]"));
    }
  }
  return absl::OkStatus();
}

PaddedBatch RepeatForBatch(const Tensor& rows, int64_t batch) {
  const int64_t k = rows.dim(0);
  Tensor repeated({batch, k, rows.dim(1)});
  for (int64_t b = 0; b < batch; ++b) {
    std::memcpy(repeated.Select(b).data(), rows.data(), rows.size() * sizeof(float));
  }
  return {repeated, std::vector<int64_t>(batch, k)};
}

Tensor LastRows(const PaddedBatch& x) {
  Tensor last({x.batch(), x.width()});
  for (int64_t b = 0; b < x.batch(); ++b) {
    std::memcpy(last.row(b), x.values.Select(b).row(x.lengths[b] - 1), x.width() * sizeof(float));
  }
  return last;
}

void ZeroPadding(Tensor& values, const std::vector<int64_t>& lengths) {
  for (size_t b = 0; b < lengths.size(); ++b) {
    for (int64_t t = lengths[b]; t < values.dim(1); ++t) {
      float* row = values.data() + b * values.stride(0) + t * values.stride(1);
      std::fill(row, row + values.dim(2), 0.0f);
    }
  }
}

}  // namespace attnserve
