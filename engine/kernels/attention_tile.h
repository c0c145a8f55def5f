// The attention kernel's micro-tile on AVX-512, compiled for it alone
// (engine/attention/scaled_dot_product.cc calls it where BestKernelIsa() has AVX-512).
#pragma once

#include <cstdint>

namespace attnserve {

// out[r][0, 32) = Σ_{s < steps} a[r][s] · b[s·ld, s·ld + 32) for the 4 rows r: 4 queries' scores
// against 32 transposed keys, or 4 rows of probabilities times 32 columns of values. Two zmm
// registers a row: eight independent FMAs a step, twice what AVX2's two ymm a row give.
void AttentionTileAvx512(const float* const a[4], const float* b, int64_t ld, int64_t steps,
                         float* const out[4]);

}  // namespace attnserve
