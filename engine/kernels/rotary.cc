#include "engine/kernels/rotary.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/parallel.h"

// The θ_i below repeat transformers' torch expressions in float32 one operation at a time: a
// Python number meeting a float32 tensor is rounded to float first, and `number / tensor` is
// torch's reciprocal(tensor) · number (two roundings). This file is built with
// -ffp-contract=off (engine/CMakeLists.txt) so that no product and sum fuse into one rounding.
// The one step not repeated bit for bit is torch's powf (SLEEF's, within an ulp): here the
// power is rounded correctly, which gives the same θ_i for the usual bases (10000, 500000 at
// 128 dimensions) and differs by an ulp in a few of them for others.

namespace attnserve {
namespace {

float ToFloat(double x) { return static_cast<float>(x); }

// base^(2i / dims) as `base ** (torch.arange(0, dims, 2).float() / dims)`: the exponent a float
// quotient, the base a float.
std::vector<float> BasePowers(float base, int64_t dims) {
  std::vector<float> powers(dims / 2);
  for (int64_t i = 0; i < dims / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dims);
    powers[i] = ToFloat(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  return powers;
}

// θ_i = 1 / base^(2i / dims): `1.0 / (base ** ...)`.
std::vector<float> DefaultFrequencies(float base, int64_t dims) {
  std::vector<float> theta = BasePowers(base, dims);
  for (float& t : theta) t = 1.0f / t;
  return theta;
}

// Dynamic NTK past the original context: base · (factor · context / original - (factor - 1))
// ^ (dims / (dims - 2)). transformers works it out on its sequence length, a tensor, so in
// float32, the power of a float with a double exponent rounded once.
std::vector<float> DynamicFrequencies(const RotaryConfig& c, int64_t context) {
  const float growth = ToFloat(c.factor) * static_cast<float>(context) /
                           static_cast<float>(c.original_max_positions) -
                       ToFloat(c.factor - 1);
  const double exponent = static_cast<double>(c.dims) / static_cast<double>(c.dims - 2);
  const float base = ToFloat(c.theta) * ToFloat(std::pow(static_cast<double>(growth), exponent));
  return DefaultFrequencies(base, c.dims);
}

// Llama 3: wavelengths longer than original / low_freq_factor slow down by the factor, shorter
// than original / high_freq_factor stay, and the band between is blended linearly in
// original / wavelength.
void ScaleLlama3(const RotaryConfig& c, std::vector<float>& theta) {
  const double original = static_cast<double>(c.original_max_positions);
  const float low_wavelength = ToFloat(original / c.low_freq_factor);
  const float high_wavelength = ToFloat(original / c.high_freq_factor);
  const float factor = ToFloat(c.factor), low = ToFloat(c.low_freq_factor);
  const float band = ToFloat(c.high_freq_factor - c.low_freq_factor);
  const float two_pi = ToFloat(2 * std::numbers::pi);
  for (float& t : theta) {
    const float wavelength = 1.0f / t * two_pi;
    if (wavelength > low_wavelength) {
      t = t / factor;
    } else if (!(wavelength < high_wavelength)) {
      const float smooth = (1.0f / wavelength * ToFloat(original) - low) / band;
      t = (1.0f - smooth) * t / factor + smooth * t;
    }
  }
}

// YaRN: θ_i / factor (interpolated) for the pairs that turn fewer than beta_slow times in the
// original context, θ_i (extrapolated) for those that turn more than beta_fast times, a linear
// ramp in i between. transformers finds the ramp's ends in double (Python's math).
std::vector<float> YarnFrequencies(const RotaryConfig& c) {
  const int64_t dims = c.dims, pairs = dims / 2;
  const std::vector<float> powers = BasePowers(ToFloat(c.theta), dims);
  auto pair_of_turns = [&](double turns) {  // the i (fractional) that turns `turns` times
    return static_cast<double>(dims) *
           std::log(static_cast<double>(c.original_max_positions) /
                    (turns * 2 * std::numbers::pi)) /
           (2 * std::log(c.theta));
  };
  const double low = std::max(std::floor(pair_of_turns(c.beta_fast)), 0.0);
  double high = std::min(std::ceil(pair_of_turns(c.beta_slow)), static_cast<double>(dims - 1));
  if (low == high) high += 0.001;  // as transformers, against a zero-width ramp
  const float ramp_start = ToFloat(low), ramp_width = ToFloat(high - low);
  const float factor = ToFloat(c.factor);
  std::vector<float> theta(pairs);
  for (int64_t i = 0; i < pairs; ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - ramp_start) / ramp_width, 0.0f, 1.0f);
    const float extrapolated_share = 1.0f - ramp;
    const float extrapolated = 1.0f / powers[i];
    const float interpolated = 1.0f / (factor * powers[i]);
    theta[i] = interpolated * (1.0f - extrapolated_share) + extrapolated * extrapolated_share;
  }
  return theta;
}

// LongRoPE: 1 / (divisor_i · base^(2i / dims)).
std::vector<float> LongRopeFrequencies(const RotaryConfig& c, const std::vector<float>& divisors) {
  std::vector<float> theta = BasePowers(ToFloat(c.theta), c.dims);
  for (size_t i = 0; i < theta.size(); ++i) theta[i] = 1.0f / (divisors[i] * theta[i]);
  return theta;
}

absl::Status CheckPositive(double value, const std::string& name) {
  if (value > 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("rotary positions: rope_scaling.", name, " is ",
                                                 value, ", must be a finite number above 0"));
}

}  // namespace

absl::Status CheckRotaryConfig(const RotaryConfig& c, int64_t head_dim) {
  auto fail = [](const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat("rotary positions: ", message));
  };
  if (c.dims <= 0 || c.dims % 2 != 0 || c.dims > head_dim) {
    return fail(absl::StrCat("rope_dims is ", c.dims, ", must be even and in [2, ", head_dim,
                             "] (the query/key head width)"));
  }
  if (!(c.theta > 1.0) || !std::isfinite(c.theta)) {
    return fail(absl::StrCat("rope_theta is ", c.theta, ", must be a finite number above 1"));
  }
  if (c.scaling == RopeScaling::kNone) return absl::OkStatus();
  if (!(c.factor >= 1.0) || !std::isfinite(c.factor)) {
    return fail(absl::StrCat("rope_scaling.factor is ", c.factor, ", must be at least 1"));
  }
  if (c.scaling == RopeScaling::kLinear) return absl::OkStatus();
  if (c.original_max_positions <= 0) {
    return fail("rope_scaling.original_max_positions must be positive");
  }
  if (c.scaling == RopeScaling::kDynamic && c.dims < 4) {
    return fail("dynamic scaling needs rope_dims of at least 4");
  }
  if (c.scaling == RopeScaling::kLlama3 &&
      !(c.low_freq_factor > 0 && c.high_freq_factor > c.low_freq_factor)) {
    return fail(absl::StrCat("rope_scaling needs 0 < low_freq_factor < high_freq_factor, has ",
                             c.low_freq_factor, " and ", c.high_freq_factor));
  }
  if (c.scaling == RopeScaling::kYarn || c.scaling == RopeScaling::kLongRope) {
    RETURN_IF_ERROR(CheckPositive(c.attention_factor, "attention_factor"));
  }
  if (c.scaling == RopeScaling::kYarn) {
    RETURN_IF_ERROR(CheckPositive(c.beta_fast, "beta_fast"));
    RETURN_IF_ERROR(CheckPositive(c.beta_slow, "beta_slow"));
  }
  if (c.scaling == RopeScaling::kLongRope) {
    for (const auto* factors : {&c.short_factor, &c.long_factor}) {
      const std::string name = factors == &c.short_factor ? "short_factor" : "long_factor";
      if (static_cast<int64_t>(factors->size()) != c.dims / 2) {
        return fail(absl::StrCat("rope_scaling.", name, " has ", factors->size(),
                                 " values, must have one per rotated pair (", c.dims / 2, ")"));
      }
      for (float f : *factors) RETURN_IF_ERROR(CheckPositive(f, name));
    }
  }
  return absl::OkStatus();
}

RotaryEmbedding::RotaryEmbedding(const RotaryConfig& config) : config_(config) {
  const float base = ToFloat(config.theta);
  switch (config.scaling) {
    case RopeScaling::kNone:
    case RopeScaling::kDynamic:  // within the original context
      inverse_frequencies_ = DefaultFrequencies(base, config.dims);
      break;
    case RopeScaling::kLinear:
      inverse_frequencies_ = DefaultFrequencies(base, config.dims);
      for (float& t : inverse_frequencies_) t = t / ToFloat(config.factor);
      break;
    case RopeScaling::kLlama3:
      inverse_frequencies_ = DefaultFrequencies(base, config.dims);
      ScaleLlama3(config, inverse_frequencies_);
      break;
    case RopeScaling::kYarn:
      inverse_frequencies_ = YarnFrequencies(config);
      break;
    case RopeScaling::kLongRope:
      inverse_frequencies_ = LongRopeFrequencies(config, config.short_factor);
      long_frequencies_ = LongRopeFrequencies(config, config.long_factor);
      break;
  }
}

std::vector<float> RotaryEmbedding::InverseFrequencies(int64_t context) const {
  if (context <= config_.original_max_positions) return inverse_frequencies_;
  if (config_.scaling == RopeScaling::kDynamic) return DynamicFrequencies(config_, context);
  if (config_.scaling == RopeScaling::kLongRope) return long_frequencies_;
  return inverse_frequencies_;
}

void RotaryEmbedding::Apply(float* rows, int64_t stride, int64_t count, int64_t num_heads,
                            int64_t head_dim, int64_t first_position, int64_t context) const {
  const std::vector<float> of_context =
      config_.depends_on_context() ? InverseFrequencies(context) : std::vector<float>();
  const std::vector<float>& theta = of_context.empty() ? inverse_frequencies_ : of_context;
  const float attention_factor = ToFloat(config_.attention_factor);
  const int64_t pairs = config_.dims / 2;
  // The second element of pair i: right after the first (interleaved) or half the dims on.
  const int64_t first_step = config_.interleaved ? 2 : 1;
  const int64_t partner = config_.interleaved ? 1 : pairs;
  ParallelFor(
      count,
      [&](int64_t r) {
        thread_local std::vector<float> cosines, sines;
        cosines.resize(pairs);
        sines.resize(pairs);
        const float position = static_cast<float>(first_position + r);
        for (int64_t i = 0; i < pairs; ++i) {
          // The float32 product, as transformers' matmul of positions and θ_i forms it; its
          // cosine and sine rounded correctly (torch's are within an ulp), then scaled in float.
          const float angle = position * theta[i];
          cosines[i] = ToFloat(std::cos(static_cast<double>(angle))) * attention_factor;
          sines[i] = ToFloat(std::sin(static_cast<double>(angle))) * attention_factor;
        }
        float* row = rows + r * stride;
        for (int64_t h = 0; h < num_heads; ++h) {
          float* head = row + h * head_dim;
#pragma omp simd
          for (int64_t i = 0; i < pairs; ++i) {
            float* a = head + i * first_step;
            const float x = a[0], y = a[partner];
            a[0] = x * cosines[i] - y * sines[i];
            a[partner] = y * cosines[i] + x * sines[i];
          }
        }
      },
      Schedule::kStatic, count * num_heads * pairs >= 1 << 14);
}

}  // namespace attnserve
