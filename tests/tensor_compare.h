// Test helper: element-wise comparison of an engine tensor with a reference tensor.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/tensor.h"

namespace attnserve::testing {

// Passes when |actual - expected| <= atol + rtol·|expected| everywhere (equal infinities match).
inline ::testing::AssertionResult AllClose(const Tensor& actual, const Tensor& expected,
                                           float atol = 1e-4f, float rtol = 1e-4f) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure()
           << "shape " << actual.ShapeString() << " != expected " << expected.ShapeString();
  }
  const Tensor a = actual.Clone(), e = expected.Clone();
  int64_t failures = 0, first = -1;
  double worst = 0.0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const float x = a.data()[i], y = e.data()[i];
    if (std::isinf(y) && x == y) continue;
    const double error = std::abs(static_cast<double>(x) - y);
    if (!(error <= atol + rtol * std::abs(y))) {
      if (first < 0) first = i;
      ++failures;
    }
    if (!std::isnan(error)) worst = std::max(worst, error);
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures << " of " << a.size() << " elements differ; first at flat index " << first
         << ": " << a.data()[first] << " vs expected " << e.data()[first] << "; largest error "
         << worst;
}

}  // namespace attnserve::testing
