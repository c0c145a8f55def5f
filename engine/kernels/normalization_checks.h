// Shape checks shared by the normalization kernels.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tensor.h"

namespace attnserve {

inline absl::Status CheckRowwise(const char* op, const Tensor& x, const Tensor& y) {
  if (x.rank() != 2 || y.rank() != 2 || x.stride(1) != 1 || y.stride(1) != 1 ||
      x.shape() != y.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": x ", x.ShapeString(), " and y ",
                                                   y.ShapeString(),
                                                   " must be equal 2-D shapes with dense rows"));
  }
  return absl::OkStatus();
}

inline absl::Status CheckVector(const char* op, const char* name, const Tensor& v, int64_t dim) {
  if (v.rank() != 1 || v.dim(0) != dim || !v.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " has shape ", v.ShapeString(), ", expected [", dim, "]"));
  }
  return absl::OkStatus();
}

}  // namespace attnserve
