// Rotary position embeddings (RoPE, Su et al. 2021): each pair of a query's or key's rotated
// dimensions turns by position · θ_i, θ_i = 1 / base^(2i / dims), so that q_m · k_n depends on
// m - n alone. Two pairings are in use: dimensions (2i, 2i + 1), as in the paper (interleaved),
// and (i, i + dims/2), as GPT-NeoX and Llama (half split). With dims below the head width only
// the first dims are rotated (partial rotary, GPT-NeoX). The context-extension scalings of
// transformers' modeling_rope_utils.py change the θ_i: linear (positions / factor), dynamic NTK
// (a larger base once the context passes the original length), Llama 3's (long wavelengths
// slowed by the factor, short ones kept, the band between blended), YaRN (the same blend, its
// band set by how many turns a wavelength makes in the original context, and cos and sin scaled
// by an attention factor) and LongRoPE (Phi-3: θ_i divided by per-pair factors, short ones
// within the original context and long ones past it, with an attention factor).
//
// The θ_i and the angles follow transformers' float32 arithmetic operation by operation, so that
// the angles equal its own (position · θ_i rounded to float, as its float32 matmul forms them):
// rounding the angles differently shifts them by up to half a float ulp of the angle, 2.4e-4
// radians at 8k positions, an error that grows with the position.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace attnserve {

enum class RopeScaling { kNone, kLinear, kDynamic, kLlama3, kYarn, kLongRope };

struct RotaryConfig {
  int64_t dims = 0;  // rotated dimensions of each head (even); 0: no rotary positions
  double theta = 10000.0;
  bool interleaved = false;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;                 // linear, dynamic, llama3, yarn
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  double beta_fast = 32.0;             // yarn: turns in the original context past which θ_i stay
  double beta_slow = 1.0;              // yarn: turns below which θ_i are divided by the factor
  int64_t original_max_positions = 0;  // dynamic, llama3, yarn, longrope: the context trained on
  double attention_factor = 1.0;       // yarn, longrope: multiplies cos and sin
  // longrope: divisors of the θ_i (dims / 2 each) for contexts up to original_max_positions
  // (short) and past it (long).
  std::vector<float> short_factor, long_factor;

  bool enabled() const { return dims > 0; }
  // Whether the θ_i depend on the sequence's length (dynamic, longrope): keys then keep the
  // rotation they had when cached, as transformers' do.
  bool depends_on_context() const {
    return scaling == RopeScaling::kDynamic || scaling == RopeScaling::kLongRope;
  }
};

// Names the first bad field for a head of head_dim dimensions.
absl::Status CheckRotaryConfig(const RotaryConfig& config, int64_t head_dim);

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const RotaryConfig& config);

  // Rotates `count` rows in place, row r at rows + r · stride holding num_heads heads of
  // head_dim values and standing at position first_position + r. context: the sequence's
  // length once these rows are in (dynamic scaling's and LongRoPE's θ_i depend on it).
  void Apply(float* rows, int64_t stride, int64_t count, int64_t num_heads, int64_t head_dim,
             int64_t first_position, int64_t context) const;

  // θ_i for a sequence of `context` tokens: dims / 2 values.
  std::vector<float> InverseFrequencies(int64_t context) const;

 private:
  RotaryConfig config_;
  std::vector<float> inverse_frequencies_;  // within the original context
  std::vector<float> long_frequencies_;     // longrope past the original context
};

}  // namespace attnserve
