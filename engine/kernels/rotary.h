// Rotary position embeddings (RoPE, Su et al. 2021): each pair of a query's or key's rotated
// dimensions turns by position · θ_i, θ_i = 1 / base^(2i / dims), so that q_m · k_n depends on
// m - n alone. Two pairings are in use: dimensions (2i, 2i + 1), as in the paper (interleaved),
// and (i, i + dims/2), as GPT-NeoX and Llama (half split). With dims below the head width only
// the first dims are rotated (partial rotary, GPT-NeoX). The context-extension scalings of
// transformers' modeling_rope_utils.py change the θ_i: linear (positions / factor), dynamic NTK
// (a larger base once the context passes the original length) and Llama 3's (long wavelengths
// slowed by the factor, short ones kept, the band between blended).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace attnserve {

enum class RopeScaling { kNone, kLinear, kDynamic, kLlama3 };

struct RotaryConfig {
  int64_t dims = 0;  // rotated dimensions of each head (even); 0: no rotary positions
  double theta = 10000.0;
  bool interleaved = false;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;                 // linear, dynamic, llama3
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  int64_t original_max_positions = 0;  // dynamic, llama3: the context trained on

  bool enabled() const { return dims > 0; }
};

// Names the first bad field for a head of head_dim dimensions.
absl::Status CheckRotaryConfig(const RotaryConfig& config, int64_t head_dim);

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const RotaryConfig& config);

  // Rotates `count` rows in place, row r at rows + r · stride holding num_heads heads of
  // head_dim values and standing at position first_position + r. context: the sequence's
  // length once these rows are in (dynamic scaling's θ_i depend on it).
  void Apply(float* rows, int64_t stride, int64_t count, int64_t num_heads, int64_t head_dim,
             int64_t first_position, int64_t context) const;

  // θ_i for a sequence of `context` tokens: dims / 2 values.
  std::vector<float> InverseFrequencies(int64_t context) const;

 private:
  RotaryConfig config_;
  std::vector<float> inverse_frequencies_;  // without dynamic scaling
};

}  // namespace attnserve
