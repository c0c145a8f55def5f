#include "engine/kernels/embedding.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/kernels/vector_ops.h"

namespace attnserve {

namespace {

// out[i] = row ids[i] of a table [vocabulary, dim], written by copy_row(id, out row).
template <typename CopyRow>
absl::Status Lookup(int64_t vocabulary, int64_t dim, std::span<const int64_t> ids, Tensor& out,
                    const CopyRow& copy_row) {
  if (out.rank() != 2 || out.dim(0) != static_cast<int64_t>(ids.size()) || out.dim(1) != dim) {
    return absl::InvalidArgumentError(absl::StrCat("EmbedTokens: output ", out.ShapeString(),
                                                   " does not fit ", ids.size(), " ids of width ",
                                                   dim));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocabulary) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, ", vocabulary,
                                                     ")"));
    }
    copy_row(ids[i], out.row(i));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EmbedTokens(const Tensor& table, std::span<const int64_t> ids, Tensor& out) {
  return Lookup(table.dim(0), table.dim(1), ids, out, [&](int64_t id, float* row) {
    std::memcpy(row, table.row(id), static_cast<size_t>(table.dim(1)) * sizeof(float));
  });
}

absl::Status EmbedTokens(const QuantizedWeight& table, std::span<const int64_t> ids, Tensor& out) {
  return Lookup(table.n(), table.k(), ids, out,
                [&](int64_t id, float* row) { table.DequantizeRow(id, row); });
}

Tensor SinusoidalPositions(int64_t positions, int64_t dim) {
  Tensor table({positions, dim});
  for (int64_t p = 0; p < positions; ++p) {
    float* row = table.row(p);
    for (int64_t i = 0; i < dim; i += 2) {
      // Computed in double: angles reach thousands of radians for long contexts.
      const double angle = static_cast<double>(p) /
                           std::pow(10000.0, static_cast<double>(i) / static_cast<double>(dim));
      row[i] = static_cast<float>(std::sin(angle));
      if (i + 1 < dim) row[i + 1] = static_cast<float>(std::cos(angle));
    }
  }
  return table;
}

absl::Status AddPositions(const Tensor& table, std::span<const int64_t> lengths, int64_t start,
                          Tensor& x) {
  const int64_t dim = x.dim(2);
  if (table.dim(1) != dim) {
    return absl::InvalidArgumentError(absl::StrCat("AddPositions: table width ", table.dim(1),
                                                   " differs from the model width ", dim));
  }
  for (size_t b = 0; b < lengths.size(); ++b) {
    if (start + lengths[b] > table.dim(0)) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, " reaches position ",
                                                     start + lengths[b] - 1, " but the model has ",
                                                     table.dim(0), " positions"));
    }
    for (int64_t t = 0; t < lengths[b]; ++t) {
      vec::Axpy(1.0f, table.row(start + t), x.data() + b * x.stride(0) + t * x.stride(1), dim);
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve
