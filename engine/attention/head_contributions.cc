#include "engine/attention/head_contributions.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<Tensor> HeadContributions(const Tensor& head_outputs, const Tensor& out_weight,
                                         int64_t num_heads) {
  if (head_outputs.rank() != 3 || out_weight.rank() != 2 || num_heads <= 0 ||
      head_outputs.dim(2) != out_weight.dim(1) || out_weight.dim(1) % num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HeadContributions: head outputs ", head_outputs.ShapeString(), " and out_proj.weight ",
        out_weight.ShapeString(), " do not fit ", num_heads, " heads"));
  }
  const int64_t batch = head_outputs.dim(0), time = head_outputs.dim(1);
  const int64_t model_dim = out_weight.dim(0), dv = out_weight.dim(1) / num_heads;
  Tensor contributions({batch, time, num_heads, model_dim});
  const Tensor rows = head_outputs.FlattenRows();  // [B·T, H·dv]
  const Tensor output_rows = contributions.Reshape({batch * time, num_heads * model_dim});
  for (int64_t h = 0; h < num_heads; ++h) {
    // z_h: columns [h·dv, (h+1)·dv) of every row; W_O[h]: the same columns of out_proj.weight.
    Tensor head_output = output_rows.Slice(1, h * model_dim, model_dim);
    RETURN_IF_ERROR(
        Linear(rows.Slice(1, h * dv, dv), out_weight.Slice(1, h * dv, dv), Tensor(), head_output));
  }
  return contributions;
}

}  // namespace attnserve
