#include "engine/kernels/rotary.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "engine/parallel.h"

namespace attnserve {
namespace {

// θ_i = 1 / base^(2i / dims), as transformers computes them (in float).
std::vector<float> BaseFrequencies(double base, int64_t dims) {
  std::vector<float> theta(dims / 2);
  for (int64_t i = 0; i < dims / 2; ++i) {
    theta[i] = static_cast<float>(1.0 / std::pow(base, static_cast<double>(2 * i) / dims));
  }
  return theta;
}

// Llama 3: wavelengths longer than original / low_freq_factor slow down by the factor, shorter
// than original / high_freq_factor stay, and the band between is blended linearly in
// original / wavelength.
void ScaleLlama3(const RotaryConfig& c, std::vector<float>& theta) {
  const double original = static_cast<double>(c.original_max_positions);
  const double low_wavelength = original / c.low_freq_factor;
  const double high_wavelength = original / c.high_freq_factor;
  for (float& t : theta) {
    const double wavelength = 2 * std::numbers::pi / t;
    if (wavelength > low_wavelength) {
      t = static_cast<float>(t / c.factor);
    } else if (wavelength >= high_wavelength) {
      const double smooth =
          (original / wavelength - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
      t = static_cast<float>((1 - smooth) * t / c.factor + smooth * t);
    }
  }
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
  return absl::OkStatus();
}

RotaryEmbedding::RotaryEmbedding(const RotaryConfig& config)
    : config_(config), inverse_frequencies_(BaseFrequencies(config.theta, config.dims)) {
  if (config.scaling == RopeScaling::kLinear) {
    for (float& t : inverse_frequencies_) t = static_cast<float>(t / config.factor);
  }
  if (config.scaling == RopeScaling::kLlama3) ScaleLlama3(config, inverse_frequencies_);
}

std::vector<float> RotaryEmbedding::InverseFrequencies(int64_t context) const {
  if (config_.scaling != RopeScaling::kDynamic || context <= config_.original_max_positions) {
    return inverse_frequencies_;
  }
  // Dynamic NTK: base · (factor · context / original - (factor - 1))^(dims / (dims - 2)).
  const double dims = static_cast<double>(config_.dims);
  const double growth = config_.factor * static_cast<double>(context) /
                            static_cast<double>(config_.original_max_positions) -
                        (config_.factor - 1);
  return BaseFrequencies(config_.theta * std::pow(growth, dims / (dims - 2)), config_.dims);
}

void RotaryEmbedding::Apply(float* rows, int64_t stride, int64_t count, int64_t num_heads,
                            int64_t head_dim, int64_t first_position, int64_t context) const {
  const std::vector<float> dynamic =
      config_.scaling == RopeScaling::kDynamic ? InverseFrequencies(context) : std::vector<float>();
  const std::vector<float>& theta = dynamic.empty() ? inverse_frequencies_ : dynamic;
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
        // The angle rounded to float as transformers forms it (position · θ_i in float32).
        const float position = static_cast<float>(first_position + r);
        for (int64_t i = 0; i < pairs; ++i) {
          const double angle = position * theta[i];
          cosines[i] = static_cast<float>(std::cos(angle));
          sines[i] = static_cast<float>(std::sin(angle));
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
