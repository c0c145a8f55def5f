#include "engine/gguf/ggml_blocks.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/bf16.h"
#include "engine/parallel.h"

namespace attnserve {

// GGUF's fields are little-endian and read in place.
static_assert(std::endian::native == std::endian::little);

std::string GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kQ4_0:
      return "Q4_0";
    case GgmlType::kQ4_1:
      return "Q4_1";
    case GgmlType::kQ5_0:
      return "Q5_0";
    case GgmlType::kQ5_1:
      return "Q5_1";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kQ2_K:
      return "Q2_K";
    case GgmlType::kQ3_K:
      return "Q3_K";
    case GgmlType::kQ4_K:
      return "Q4_K";
    case GgmlType::kQ5_K:
      return "Q5_K";
    case GgmlType::kQ6_K:
      return "Q6_K";
    case GgmlType::kBF16:
      return "BF16";
  }
  return absl::StrCat("type ", static_cast<uint32_t>(type));
}

bool IsQuantized(GgmlType type) {
  return GgmlLayout(type).has_value() && type != GgmlType::kF32 && type != GgmlType::kF16 &&
         type != GgmlType::kBF16;
}

std::optional<GgmlBlockLayout> GgmlLayout(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return GgmlBlockLayout{1, 4};
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return GgmlBlockLayout{1, 2};
    case GgmlType::kQ4_0:
      return GgmlBlockLayout{32, 18};
    case GgmlType::kQ4_1:
      return GgmlBlockLayout{32, 20};
    case GgmlType::kQ5_0:
      return GgmlBlockLayout{32, 22};
    case GgmlType::kQ5_1:
      return GgmlBlockLayout{32, 24};
    case GgmlType::kQ8_0:
      return GgmlBlockLayout{32, 34};
    case GgmlType::kQ2_K:
      return GgmlBlockLayout{256, 84};
    case GgmlType::kQ3_K:
      return GgmlBlockLayout{256, 110};
    case GgmlType::kQ4_K:
      return GgmlBlockLayout{256, 144};
    case GgmlType::kQ5_K:
      return GgmlBlockLayout{256, 176};
    case GgmlType::kQ6_K:
      return GgmlBlockLayout{256, 210};
  }
  return std::nullopt;
}

float Fp16ToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity or NaN, payload kept
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // A subnormal half, mantissa · 2^-24, is a normal float: bring its leading one to bit 10.
    const int shift = std::countl_zero(mantissa) - 21;
    mantissa <<= shift;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

namespace {

float LoadHalf(const uint8_t* p) {
  uint16_t half;
  std::memcpy(&half, p, sizeof(half));
  return Fp16ToFloat(half);
}

// The block layouts below are ggml's (ggml-common.h's block_q4_0 ... block_q6_K), field by
// field at their byte offsets. Each function writes one block's elements to y[0, block_size).

// d (fp16), then 16 bytes: element j in the low nibble of byte j, element j + 16 in its high
// nibble; the value is (q - 8) · d.
void Q4_0Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xf) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// d and m (fp16), then nibbles as Q4_0's; the value is q · d + m.
void Q4_1Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b), m = LoadHalf(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xf) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q4_0's nibbles with a fifth bit per element from a 32-bit mask (bit i for element i).
void Q5_0Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, sizeof(qh));
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int low = static_cast<int>((qs[j] & 0xfu) | ((qh >> j) & 1u) << 4);
    const int high = static_cast<int>((qs[j] >> 4) | ((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(low - 16) * d;
    y[j + 16] = static_cast<float>(high - 16) * d;
  }
}

// Q5_0's five bits with Q4_1's min: d, m, the mask, the nibbles; the value is q · d + m.
void Q5_1Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b), m = LoadHalf(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, sizeof(qh));
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const uint32_t low = (qs[j] & 0xfu) | ((qh >> j) & 1u) << 4;
    const uint32_t high = (qs[j] >> 4) | ((qh >> (j + 16)) & 1u) << 4;
    y[j] = static_cast<float>(low) * d + m;
    y[j + 16] = static_cast<float>(high) * d + m;
  }
}

// d (fp16), then 32 int8s.
void Q8_0Block(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// The k-quants: 256 elements in 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 8 of 32 (Q4_K, Q5_K),
// each with a scale (and a min) that multiplies the block's fp16 d (and dmin). Their 2-, 4- and
// 6-bit fields pack the two halves of 128 elements so that one byte's fields are 32 elements
// apart.

// 16 bytes of scale (low nibble) and min (high nibble) per sub-block, 64 bytes of 2-bit values,
// d, dmin. Within each 128 elements, byte l of the half's 32 holds elements l, 32 + l, 64 + l and
// 96 + l at bits 0, 2, 4 and 6. The value is d·scale·q - dmin·min.
void Q2_KBlock(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = LoadHalf(b + 80), dmin = LoadHalf(b + 82);
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(scales[s] & 0xf);
    const float ml = dmin * static_cast<float>(scales[s] >> 4);
    const uint8_t* q = qs + (s / 8) * 32 + (s % 2) * 16;
    const int shift = 2 * ((s % 8) / 2);
    for (int l = 0; l < 16; ++l) y[s * 16 + l] = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
  }
}

// Q3_K's 6-bit signed scale of sub-block s (stored + 32): the low four bits in the nibbles of
// bytes 0-7 (low nibbles for sub-blocks 0-7, high for 8-15), the top two in bytes 8-11 (byte
// 8 + s % 4, bits 2·(s / 4)).
int Q3_KScale(const uint8_t* scales, int s) {
  const int low = s < 8 ? scales[s] & 0xf : scales[s - 8] >> 4;
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | high << 4) - 32;
}

// 32 bytes of high bits (hmask), 64 bytes of 2-bit values laid out as Q2_K's, 12 bytes of scales,
// d. Element e's high bit is bit (e / 32) of hmask[e % 32]; a value's 3 bits are q - 4 when its
// high bit is clear, q when set. The value is d·scale·q.
void Q3_KBlock(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* scales = b + 96;
  const float d = LoadHalf(b + 108);
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(Q3_KScale(scales, s));
    const int offset = (s % 2) * 16, group = s / 2;  // group: the 32 elements of s
    const uint8_t* q = qs + (s / 8) * 32 + offset;
    const uint8_t* h = hmask + offset;
    const int shift = 2 * (group % 4);
    for (int l = 0; l < 16; ++l) {
      const int value = ((q[l] >> shift) & 3) - (((h[l] >> group) & 1) != 0 ? 0 : 4);
      y[s * 16 + l] = dl * static_cast<float>(value);
    }
  }
}

// Q4_K and Q5_K's 6-bit scale and min of sub-block s from 12 bytes: sub-blocks 0-3 in the low
// six bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 in bytes 8-11's low (scale) and high (min)
// nibbles, with the top two bits in the top bits of bytes 0-3 (scales) and 4-7 (mins).
void K4ScaleMin(const uint8_t* q, int s, uint8_t* scale, uint8_t* min) {
  if (s < 4) {
    *scale = q[s] & 63;
    *min = q[s + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[s + 4] & 0xf) | ((q[s - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[s + 4] >> 4) | ((q[s] >> 6) << 4));
  }
}

// d, dmin, 12 bytes of scales and mins, 128 bytes of nibbles: each 64 elements take 32 bytes,
// the first 32 elements in the low nibbles, the next 32 in the high. d·scale·q - dmin·min.
void Q4_KBlock(const uint8_t* b, float* y) {
  const float d = LoadHalf(b), dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int s = 0; s < 8; ++s) {
    uint8_t scale, min;
    K4ScaleMin(scales, s, &scale, &min);
    const float dl = d * static_cast<float>(scale), ml = dmin * static_cast<float>(min);
    const uint8_t* q = qs + (s / 2) * 32;
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l)
      y[s * 32 + l] = dl * static_cast<float>((q[l] >> shift) & 0xf) - ml;
  }
}

// Q4_K with a fifth bit: 32 bytes of high bits after the scales, element e's in bit e / 32 of
// byte e % 32.
void Q5_KBlock(const uint8_t* b, float* y) {
  const float d = LoadHalf(b), dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int s = 0; s < 8; ++s) {
    uint8_t scale, min;
    K4ScaleMin(scales, s, &scale, &min);
    const float dl = d * static_cast<float>(scale), ml = dmin * static_cast<float>(min);
    const uint8_t* q = qs + (s / 2) * 32;
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      const int value = ((q[l] >> shift) & 0xf) | ((qh[l] >> s) & 1) << 4;
      y[s * 32 + l] = dl * static_cast<float>(value) - ml;
    }
  }
}

// 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 int8 scales, d. Within each 128
// elements (64 low bytes, 32 high bytes), element r's low nibble is in byte r % 64 (low nibble
// for r < 64, high otherwise) and its high part in byte r % 32, bits 2·(r / 32). The 6-bit value
// is stored + 32; the result is d·scale·q.
void Q6_KBlock(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const uint8_t* scales = b + 192;
  const float d = LoadHalf(b + 208);
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(static_cast<int8_t>(scales[s]));
    const int quarter = (s % 8) / 2, offset = (s % 2) * 16;
    const uint8_t* low = ql + (s / 8) * 64 + (quarter % 2) * 32 + offset;
    const uint8_t* high = qh + (s / 8) * 32 + offset;
    const int low_shift = (quarter / 2) * 4, high_shift = 2 * quarter;
    for (int l = 0; l < 16; ++l) {
      const int value = (((low[l] >> low_shift) & 0xf) | ((high[l] >> high_shift) & 3) << 4) - 32;
      y[s * 16 + l] = dl * static_cast<float>(value);
    }
  }
}

// Each type's groups: scale s[g] (and minimum m[g]) of group g of one block, such that the
// block's element e is level · s[e / group] + m[e / group] with the level an integer in the
// grid's range, every value computed as the functions above compute it.

void Q4_0Groups(const uint8_t* b, float* s, float* m) {  // (q - 8) · d = q · d + (-8d)
  s[0] = LoadHalf(b);
  m[0] = -8.0f * s[0];
}

void Q4_1Groups(const uint8_t* b, float* s, float* m) {
  s[0] = LoadHalf(b);
  m[0] = LoadHalf(b + 2);
}

void Q4_KGroups(const uint8_t* b, float* s, float* m) {  // d·scale·q - dmin·min
  const float d = LoadHalf(b), dmin = LoadHalf(b + 2);
  for (int g = 0; g < 8; ++g) {
    uint8_t scale, min;
    K4ScaleMin(b + 4, g, &scale, &min);
    s[g] = d * static_cast<float>(scale);
    m[g] = -(dmin * static_cast<float>(min));
  }
}

void Q8_0Groups(const uint8_t* b, float* s, float*) { s[0] = LoadHalf(b); }

void Q5_0Groups(const uint8_t* b, float* s, float*) { s[0] = LoadHalf(b); }  // levels q - 16

void Q3_KGroups(const uint8_t* b, float* s, float*) {
  const float d = LoadHalf(b + 108);
  for (int g = 0; g < 16; ++g) s[g] = d * static_cast<float>(Q3_KScale(b + 96, g));
}

void Q6_KGroups(const uint8_t* b, float* s, float*) {
  const float d = LoadHalf(b + 208);
  for (int g = 0; g < 16; ++g) s[g] = d * static_cast<float>(static_cast<int8_t>(b[192 + g]));
}

template <int kBlockBytes, int kBlockSize, typename Block>
void Blocks(const uint8_t* in, float* out, int64_t count, Block block) {
  for (int64_t i = 0; i < count; ++i) block(in + i * kBlockBytes, out + i * kBlockSize);
}

// `count` blocks of `type` (one GgmlLayout knows) from `in` to `out`.
void DequantizeBlocks(GgmlType type, const uint8_t* in, float* out, int64_t count) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(out, in, static_cast<size_t>(count) * sizeof(float));
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < count; ++i) out[i] = LoadHalf(in + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t value;
        std::memcpy(&value, in + 2 * i, sizeof(value));
        out[i] = FromBf16(value);
      }
      return;
    case GgmlType::kQ4_0:
      return Blocks<18, 32>(in, out, count, Q4_0Block);
    case GgmlType::kQ4_1:
      return Blocks<20, 32>(in, out, count, Q4_1Block);
    case GgmlType::kQ5_0:
      return Blocks<22, 32>(in, out, count, Q5_0Block);
    case GgmlType::kQ5_1:
      return Blocks<24, 32>(in, out, count, Q5_1Block);
    case GgmlType::kQ8_0:
      return Blocks<34, 32>(in, out, count, Q8_0Block);
    case GgmlType::kQ2_K:
      return Blocks<84, 256>(in, out, count, Q2_KBlock);
    case GgmlType::kQ3_K:
      return Blocks<110, 256>(in, out, count, Q3_KBlock);
    case GgmlType::kQ4_K:
      return Blocks<144, 256>(in, out, count, Q4_KBlock);
    case GgmlType::kQ5_K:
      return Blocks<176, 256>(in, out, count, Q5_KBlock);
    case GgmlType::kQ6_K:
      return Blocks<210, 256>(in, out, count, Q6_KBlock);
  }
}

}  // namespace

std::optional<GgmlGridShape> GgmlGrid(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K:
      return GgmlGridShape{4, 32};
    case GgmlType::kQ8_0:
    case GgmlType::kQ5_0:
      return GgmlGridShape{8, 32};
    case GgmlType::kQ3_K:
    case GgmlType::kQ6_K:
      return GgmlGridShape{8, 16};
    default:
      return std::nullopt;
  }
}

absl::Status GgmlGroupScales(GgmlType type, std::span<const uint8_t> blocks,
                             std::span<float> scales, std::span<float> minimums) {
  const std::optional<GgmlGridShape> grid = GgmlGrid(type);
  const std::optional<GgmlBlockLayout> layout = GgmlLayout(type);
  if (!grid.has_value() || !layout.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(GgmlTypeName(type), " has no grid"));
  }
  const int64_t groups = layout->block_size / grid->group_size;  // a block's
  const auto count = static_cast<int64_t>(blocks.size()) / layout->block_bytes;
  if (static_cast<int64_t>(blocks.size()) % layout->block_bytes != 0 ||
      static_cast<int64_t>(scales.size()) != count * groups ||
      minimums.size() != (grid->bits == 4 ? scales.size() : 0)) {
    return absl::InvalidArgumentError(absl::StrCat(blocks.size(), " bytes of ", GgmlTypeName(type),
                                                   " blocks do not give ", scales.size(),
                                                   " scales and ", minimums.size(), " minimums"));
  }
  void (*groups_of)(const uint8_t*, float*, float*) = nullptr;
  switch (type) {
    case GgmlType::kQ4_0:
      groups_of = Q4_0Groups;
      break;
    case GgmlType::kQ4_1:
      groups_of = Q4_1Groups;
      break;
    case GgmlType::kQ4_K:
      groups_of = Q4_KGroups;
      break;
    case GgmlType::kQ8_0:
      groups_of = Q8_0Groups;
      break;
    case GgmlType::kQ5_0:
      groups_of = Q5_0Groups;
      break;
    case GgmlType::kQ3_K:
      groups_of = Q3_KGroups;
      break;
    default:
      groups_of = Q6_KGroups;
  }
  float ignored[16];
  for (int64_t i = 0; i < count; ++i) {
    groups_of(blocks.data() + i * layout->block_bytes, scales.data() + i * groups,
              minimums.empty() ? ignored : minimums.data() + i * groups);
  }
  return absl::OkStatus();
}

absl::Status DequantizeGgml(GgmlType type, std::span<const uint8_t> blocks, std::span<float> out) {
  const std::optional<GgmlBlockLayout> layout = GgmlLayout(type);
  if (!layout.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot dequantize ", GgmlTypeName(type)));
  }
  const uint64_t block_size = static_cast<uint64_t>(layout->block_size);
  const uint64_t block_bytes = static_cast<uint64_t>(layout->block_bytes);
  if (out.size() % block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(out.size(), " elements are not whole ",
                                                   GgmlTypeName(type), " blocks of ", block_size));
  }
  const uint64_t count = out.size() / block_size;
  if (blocks.size() % block_bytes != 0 || blocks.size() / block_bytes != count) {
    return absl::InvalidArgumentError(absl::StrCat(count, " ", GgmlTypeName(type), " blocks take ",
                                                   count, " x ", block_bytes, " bytes, not ",
                                                   blocks.size()));
  }
  // Chunks of about 64 Ki elements across the threads: each block is independent.
  const int64_t per_chunk = std::max<int64_t>(1, (int64_t{1} << 16) / layout->block_size);
  const int64_t chunks = (static_cast<int64_t>(count) + per_chunk - 1) / per_chunk;
  ParallelFor(chunks, [&](int64_t chunk) {
    const int64_t first = chunk * per_chunk;
    const int64_t last = std::min(static_cast<int64_t>(count), first + per_chunk);
    DequantizeBlocks(type, blocks.data() + first * layout->block_bytes,
                     out.data() + first * layout->block_size, last - first);
  });
  return absl::OkStatus();
}

}  // namespace attnserve
