#include "engine/attention/simple_self.h"

#include <cmath>

#include "common/status_macros.h"
#include "engine/attention/scaled_dot_product.h"

namespace attnserve {

absl::StatusOr<Tensor> SimpleSelfAttention(const PaddedBatch& x, bool scaled, bool causal) {
  RETURN_IF_ERROR(CheckPaddedBatch("simple self-attention input", x, 0));
  // One head whose queries, keys and values are the inputs themselves.
  const float scale = scaled ? 1.0f / std::sqrt(static_cast<float>(x.width())) : 1.0f;
  Tensor out({x.batch(), x.time(), x.width()});
  ScaledDotProductAttention(x.values, x.lengths, x.values, x.values, x.lengths, 1,
                            {scale, causal, {}}, out);
  return out;
}

}  // namespace attnserve
