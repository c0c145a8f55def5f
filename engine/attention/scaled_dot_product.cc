#include "engine/attention/scaled_dot_product.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "engine/bf16.h"
#include "engine/kernels/attention_tile.h"
#include "engine/kernels/kernel_isa.h"
#include "engine/kernels/softmax.h"
#include "engine/kernels/vector_ops.h"
#include "engine/parallel.h"

namespace attnserve {
namespace {

constexpr int kRows = 4;       // queries per micro-tile: they share every key and value load
constexpr int64_t kTile = 32;  // keys (or value columns) per micro-tile: two AVX-512 registers
constexpr int64_t kQueryBlock = 32;  // queries per parallel work item
constexpr int64_t kFewQueries = 4;   // up to this many queries per sequence read keys in place

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Cached elements as floats: float32 as it is, half and bfloat16 widened (exactly).
inline float ToFloat(float x) { return x; }
inline float ToFloat(Half x) { return FromF16(x); }
inline float ToFloat(uint16_t x) { return FromBf16(x); }
#ifdef ATTNSERVE_AVX2
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const Half* p) {
#ifdef __F16C__
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  float widened[8];
  for (int i = 0; i < 8; ++i) widened[i] = FromF16(p[i]);
  return _mm256_loadu_ps(widened);
#endif
}
inline __m256 Load8(const uint16_t* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
#endif

// out[r][0, 16) = Σ_{s < steps} a[r][s] · b[s·ld, s·ld + 16) for kRows rows: half a micro-tile
// on AVX2, two ymm registers a row.
inline void HalfTileProduct(const float* const a[kRows], const float* b, int64_t ld, int64_t steps,
                            float* const out[kRows]) {
#ifdef ATTNSERVE_AVX2
  __m256 acc[kRows][2];
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    const __m256 b0 = _mm256_loadu_ps(b + s * ld);
    const __m256 b1 = _mm256_loadu_ps(b + s * ld + 8);
    for (int r = 0; r < kRows; ++r) {
      const __m256 as = _mm256_broadcast_ss(a[r] + s);
      acc[r][0] = _mm256_fmadd_ps(as, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(as, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    _mm256_storeu_ps(out[r], acc[r][0]);
    _mm256_storeu_ps(out[r] + 8, acc[r][1]);
  }
#else
  for (int r = 0; r < kRows; ++r) std::fill(out[r], out[r] + kTile / 2, 0.0f);
  for (int64_t s = 0; s < steps; ++s) {
    for (int r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kTile / 2; ++c) out[r][c] += a[r][s] * b[s * ld + c];
    }
  }
#endif
}

// out[r][0, kTile) = Σ_{s < steps} a[r][s] · b[s·ld, s·ld + kTile) for kRows rows: the one
// micro-kernel behind both Q·Kᵀ (a = queries, b = transposed keys) and P·V (a = probabilities,
// b = values). AVX-512 doubles its multiply-adds a cycle: at 256 tokens the attention of
// all-MiniLM-L6-v2 took 44% of an embedding with bf16 weights on AVX2's.
inline void TileProduct(const float* const a[kRows], const float* b, int64_t ld, int64_t steps,
                        float* const out[kRows]) {
  static const bool avx512 = BestKernelIsa() >= KernelIsa::kAvx512;
  if (avx512) {
    AttentionTileAvx512(a, b, ld, steps, out);
    return;
  }
  HalfTileProduct(a, b, ld, steps, out);
  float* const right[kRows] = {out[0] + kTile / 2, out[1] + kTile / 2, out[2] + kTile / 2,
                               out[3] + kTile / 2};
  HalfTileProduct(a, b + kTile / 2, ld, steps, right);
}

// p[j] = p[j] · scale − slope · |position − j| for j in [begin, end): the scaled scores with
// ALiBi's bias. Without ALiBi the plain scaling vectorizes; with the bias in the same loop it did
// not, and took 13% of an embedding of 256 tokens.
inline void ScaleScores(float* p, int64_t begin, int64_t end, float scale, float slope,
                        int64_t position) {
  if (slope == 0.0f) {
#pragma omp simd
    for (int64_t j = begin; j < end; ++j) p[j] *= scale;
    return;
  }
  for (int64_t j = begin; j < end; ++j) {
    p[j] = p[j] * scale - slope * static_cast<float>(std::abs(position - j));
  }
}

// Per-call layout of the keys and values, padded to whole tiles so the micro-kernels never
// branch: keys transposed to [B·H][dk][Tk_pad] (zero past each sequence's length), values
// either read in place (head width a multiple of the tile, each sequence's rows in one block) or
// copied to [B·H][Tk][dv_pad].
struct PackedKeysValues {
  int64_t keys_padded = 0;  // Tk rounded up to the tile
  int64_t dv_padded = 0;
  int64_t keys = 0;  // Tk: the longest sequence's keys
  std::vector<float> keys_transposed;
  std::vector<float> values_copy;  // empty when values are read in place
};

template <typename T>
PackedKeysValues Pack(std::span<const RowBlocksOf<T>> k, std::span<const RowBlocksOf<T>> v,
                      std::span<const int64_t> k_lengths, int64_t kv_heads, int64_t dk,
                      int64_t dv) {
  const auto batch = static_cast<int64_t>(k.size());
  PackedKeysValues packed;
  bool values_in_place = std::is_same_v<T, float> && dv % kTile == 0;
  for (int64_t b = 0; b < batch; ++b) {
    packed.keys = std::max(packed.keys, k_lengths[b]);
    values_in_place = values_in_place && k_lengths[b] <= v[b].block_rows;
  }
  packed.keys_padded = RoundUp(std::max<int64_t>(packed.keys, 1), kTile);
  packed.dv_padded = RoundUp(dv, kTile);
  packed.keys_transposed.resize(batch * kv_heads * dk * packed.keys_padded);
  if (!values_in_place) {
    packed.values_copy.resize(batch * kv_heads * packed.keys * packed.dv_padded);
  }

  ParallelFor(batch * kv_heads, [&](int64_t bh) {
    const int64_t b = bh / kv_heads, h = bh % kv_heads;
    const int64_t length = k_lengths[b];
    // resize() zeroed the buffer, so key columns past the length stay zero.
    float* kt = packed.keys_transposed.data() + bh * dk * packed.keys_padded;
    for (int64_t j = 0; j < length; ++j) {
      const T* key = k[b].row(j) + h * dk;
      for (int64_t d = 0; d < dk; ++d) kt[d * packed.keys_padded + j] = ToFloat(key[d]);
    }
    if (values_in_place) return;
    float* vp = packed.values_copy.data() + bh * packed.keys * packed.dv_padded;
    for (int64_t j = 0; j < length; ++j) {
      const T* value = v[b].row(j) + h * dv;
      std::transform(value, value + dv, vp + j * packed.dv_padded, [](T x) { return ToFloat(x); });
      std::fill(vp + j * packed.dv_padded + dv, vp + (j + 1) * packed.dv_padded, 0.0f);
    }
  });
  return packed;
}

// The keys [begin, end) that the query at key position `position` attends to.
struct KeyRange {
  int64_t begin, end;
};
KeyRange KeysSeenAt(int64_t position, int64_t k_len, const ScoreOptions& options) {
  if (!options.causal) return {0, k_len};
  const int64_t end = std::min(k_len, position + 1);
  return {options.window > 0 ? std::max<int64_t>(0, end - options.window) : 0, end};
}

// One head of one sequence, as the micro-kernels see it.
template <typename T>
struct HeadView {
  const float* queries;  // row i at queries + i · query_stride, dk wide
  int64_t query_stride;
  // In place (few queries): key and value rows, this head's columns at key_offset and
  // value_offset.
  RowBlocksOf<T> key_rows, value_rows;
  int64_t key_offset, value_offset;
  // Packed (tiled kernel): keys transposed, dimension d at keys + d · key_stride; value j at
  // values + j · value_stride, a whole number of tiles wide.
  const float* keys;
  int64_t key_stride;
  const float* values;
  int64_t value_stride;
  float* out;  // row i at out + i · out_stride, dv wide
  int64_t out_stride;
  int64_t q_len, k_len, dk, dv;
  float slope;  // ALiBi; 0 without
};

// Attends queries [i0, min(i0 + kRows, end)) of one head. scores holds kRows rows of
// keys_padded floats.
template <typename T>
void AttendQueryGroup(const HeadView<T>& head, int64_t i0, int64_t end, const ScoreOptions& options,
                      const float* zero_query, float* scores) {
  const float* q_rows[kRows];
  float* p_rows[kRows];
  KeyRange ranges[kRows];  // keys each query sees; empty for padding or past `end`
  int64_t most_keys = 0, first_key = INT64_MAX;
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = i0 + r;
    const bool valid = i < end && i < head.q_len;
    ranges[r] =
        valid ? KeysSeenAt(head.k_len - head.q_len + i, head.k_len, options) : KeyRange{0, 0};
    if (valid) first_key = std::min(first_key, ranges[r].begin);
    most_keys = std::max(most_keys, ranges[r].end);
    q_rows[r] = valid ? head.queries + i * head.query_stride : zero_query;
    p_rows[r] = scores + r * head.key_stride;
  }
  if (first_key == INT64_MAX) first_key = 0;
  // A sliding window leaves the keys before the group's earliest one out of both products.
  first_key -= first_key % kTile;

  const int64_t keys_in_tiles = RoundUp(most_keys, kTile);
  for (int64_t column = first_key; column < keys_in_tiles; column += kTile) {
    float* const score_tile[kRows] = {p_rows[0] + column, p_rows[1] + column, p_rows[2] + column,
                                      p_rows[3] + column};
    TileProduct(q_rows, head.keys + column, head.key_stride, head.dk, score_tile);
  }
  for (int r = 0; r < kRows; ++r) {
    float* p = p_rows[r];
    const int64_t position = head.k_len - head.q_len + i0 + r;
    const auto [begin, limit] = ranges[r];
    ScaleScores(p, begin, limit, options.scale, head.slope, position);
    // Padding rows (an empty range at 0) are zeroed from first_key on by the softmax.
    const int64_t from = std::max(begin, first_key);
    std::fill(p + first_key, p + from, 0.0f);
    MaskedSoftmaxRow(p + from, limit - from, keys_in_tiles - from);
  }

  float tile[kRows][kTile];
  float* const tile_rows[kRows] = {tile[0], tile[1], tile[2], tile[3]};
  const float* const p_from_first[kRows] = {p_rows[0] + first_key, p_rows[1] + first_key,
                                            p_rows[2] + first_key, p_rows[3] + first_key};
  for (int64_t column = 0; column < head.dv; column += kTile) {
    TileProduct(p_from_first, head.values + first_key * head.value_stride + column,
                head.value_stride, most_keys - first_key, tile_rows);
    const int64_t width = std::min(kTile, head.dv - column);
    for (int r = 0; r < kRows && i0 + r < end; ++r) {
      float* o = head.out + (i0 + r) * head.out_stride + column;
      if (ranges[r].end == 0) {
        std::fill(o, o + width, 0.0f);
      } else {
        std::copy(tile[r], tile[r] + width, o);
      }
    }
  }
}

// The cache is cold when a decoding step reaches it (the weights streamed through since), and
// one head's rows lie a whole row of heads apart, too far for the hardware prefetcher: without
// this, the reads wait on memory latency (perf annotate: the loads take 90% of the kernel).
// Prefetching past the end of the rows is harmless: prefetches never fault.
constexpr int64_t kPrefetchRows = 8;
template <typename T>
inline void PrefetchRow(const T* row, int64_t width) {
  for (int64_t i = 0; i < width; i += 64 / static_cast<int64_t>(sizeof(T))) {
    __builtin_prefetch(row + i);
  }
}

#ifdef ATTNSERVE_AVX2
// Lane u of the result: the sum of v[u]'s eight lanes.
inline __m256 HorizontalSums(const __m256 v[8]) {
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}
#endif

// scores[j] = query · key j for j in [0, count). Eight keys at a time, each with its own
// accumulator: one dot product at a time is a chain of dependent FMAs plus a horizontal sum,
// which held the kernel to 17 GB/s (bench/kernels_bench BM_DecodeAttentionFromMemory).
template <typename T>
void KeyScores(const float* query, const T* keys, int64_t stride, int64_t dk, int64_t count,
               float* scores) {
  int64_t j = 0;
#ifdef ATTNSERVE_AVX2
  if (dk % 8 == 0) {
    for (; j + 8 <= count; j += 8) {
      for (int u = 0; u < 8; ++u) PrefetchRow(keys + (j + kPrefetchRows + u) * stride, dk);
      __m256 acc[8];
      for (int u = 0; u < 8; ++u) acc[u] = _mm256_setzero_ps();
      for (int64_t c = 0; c < dk; c += 8) {
        const __m256 q = _mm256_loadu_ps(query + c);
        for (int u = 0; u < 8; ++u) {
          acc[u] = _mm256_fmadd_ps(q, Load8(keys + (j + u) * stride + c), acc[u]);
        }
      }
      _mm256_storeu_ps(scores + j, HorizontalSums(acc));
    }
  }
#endif
  for (; j < count; ++j) {
    PrefetchRow(keys + (j + kPrefetchRows) * stride, dk);
    if constexpr (std::is_same_v<T, float>) {
      scores[j] = vec::Dot(query, keys + j * stride, dk);
    } else {
      float sum = 0.0f;
      for (int64_t c = 0; c < dk; ++c) sum += query[c] * ToFloat(keys[j * stride + c]);
      scores[j] = sum;
    }
  }
}

// out[0, dv) = Σ_j p[j] · value j over [0, count), added to out when `accumulate` (the blocks
// after a paged cache's first), the output held in registers for 64 columns at a time rather
// than loaded and stored for every row.
template <typename T>
void WeightedValues(const float* p, const T* values, int64_t stride, int64_t dv, int64_t count,
                    bool accumulate, float* out) {
  int64_t column = 0;
#ifdef ATTNSERVE_AVX2
  for (; column + 64 <= dv; column += 64) {
    __m256 acc[8];
    for (int v = 0; v < 8; ++v) {
      acc[v] = accumulate ? _mm256_loadu_ps(out + column + 8 * v) : _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < count; ++j) {
      PrefetchRow(values + (j + kPrefetchRows) * stride + column, 64);
      const __m256 weight = _mm256_broadcast_ss(p + j);
      const T* row = values + j * stride + column;
      for (int v = 0; v < 8; ++v) acc[v] = _mm256_fmadd_ps(weight, Load8(row + 8 * v), acc[v]);
    }
    for (int v = 0; v < 8; ++v) _mm256_storeu_ps(out + column + 8 * v, acc[v]);
  }
#endif
  if (column == dv) return;
  if (!accumulate) std::fill(out + column, out + dv, 0.0f);
  for (int64_t j = 0; j < count; ++j) {
    PrefetchRow(values + (j + kPrefetchRows) * stride + column, dv - column);
    if constexpr (std::is_same_v<T, float>) {
      vec::Axpy(p[j], values + j * stride + column, out + column, dv - column);
    } else {
      for (int64_t c = column; c < dv; ++c) out[c] += p[j] * ToFloat(values[j * stride + c]);
    }
  }
}

// Decoding: a few queries against a long cache. Packing the keys would copy the whole cache on
// every step, so each query instead reads the cached rows in place: dot products with the keys,
// softmax, then a weighted sum of the value rows. The query heads of a group (heads[0, group),
// sharing one key/value head) take the rows a chunk at a time, so that each row comes from
// memory once and from the L1 cache for the rest of the group. scores holds group rows of
// k_len floats.
constexpr int64_t kChunkRows = 64;  // 16 KiB of keys at dk = 64

// What one part of a query's keys gives each head of the group, to be merged with the other parts
// (a long cache is split among the threads): the largest score, the sum of exp(score - largest)
// and the values weighted by those exponentials, dv wide.
struct PartialAttention {
  float largest, sum;
  float* values;
};

// Attends query i of the group's heads over `part` of the keys it sees: into each head's output
// (normalized) when `partials` is null, else into partials[g].
template <typename T>
void AttendQueriesInPlace(const HeadView<T>* heads, int64_t group, int64_t i,
                          const ScoreOptions& options, KeyRange part, float* scores,
                          PartialAttention* partials) {
  const HeadView<T>& first = heads[0];
  const int64_t position = first.k_len - first.q_len + i;
  // Plain variables, not a structured binding: the lambda below captures them (C++20 allows
  // that, but clang before 16 does not).
  const int64_t begin = part.begin, limit = part.end;
  const int64_t block = first.key_rows.block_rows;
  const int64_t stride = first.k_len;
  // [j, j + n): the rows from j to the end of j's chunk, its cache block or the range.
  const auto chunk = [&](int64_t j) {
    return std::min({kChunkRows - j % kChunkRows, block - j % block, limit - j});
  };
  for (int64_t j = begin; j < limit; j += chunk(j)) {
    for (int64_t g = 0; g < group; ++g) {
      KeyScores(heads[g].queries + i * first.query_stride, first.key_rows.row(j) + first.key_offset,
                first.key_rows.stride, first.dk, chunk(j), scores + g * stride + j);
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float* p = scores + g * stride;
    ScaleScores(p, begin, limit, options.scale, heads[g].slope, position);
    if (partials == nullptr) {
      MaskedSoftmaxRow(p + begin, limit - begin, limit - begin);
    } else {
      partials[g].largest = vec::Max(p + begin, limit - begin);
      partials[g].sum =
          limit > begin ? vec::ExpShiftedSum(p + begin, limit - begin, partials[g].largest) : 0.0f;
    }
  }
  const auto out = [&](int64_t g) {
    return partials == nullptr ? heads[g].out + i * first.out_stride : partials[g].values;
  };
  if (limit == begin) {
    for (int64_t g = 0; g < group; ++g) std::fill(out(g), out(g) + first.dv, 0.0f);
  }
  for (int64_t j = begin; j < limit; j += chunk(j)) {
    for (int64_t g = 0; g < group; ++g) {
      WeightedValues(scores + g * stride + j, first.value_rows.row(j) + first.value_offset,
                     first.value_rows.stride, first.dv, chunk(j), j > begin, out(g));
    }
  }
}

// out[0, dv) = the softmax-weighted values of a query's whole key range from its `count` parts,
// `stride` apart in `parts`.
void MergePartials(const PartialAttention* parts, int64_t count, int64_t stride, int64_t dv,
                   float* out) {
  float largest = -INFINITY;
  for (int64_t p = 0; p < count; ++p) {
    if (parts[p * stride].sum > 0.0f) largest = std::max(largest, parts[p * stride].largest);
  }
  std::fill(out, out + dv, 0.0f);
  float sum = 0.0f;
  for (int64_t p = 0; p < count; ++p) {
    const PartialAttention& part = parts[p * stride];
    if (part.sum == 0.0f) continue;
    const float weight = std::exp(part.largest - largest);
    sum += weight * part.sum;
    vec::Axpy(weight, part.values, out, dv);
  }
  if (sum > 0.0f) vec::Scale(out, dv, 1.0f / sum);
}

// How many parts to split each query's keys into when decoding, so that the threads have about
// kPartsPerThread work items each (a batch of one has as many as the model has key/value heads:
// 3 for SmolLM2, which left one of two threads idle a third of the time) and no part is shorter
// than kMinPartKeys (merging costs a pass over dv floats per head and part).
constexpr int64_t kMaxKeyParts = 64;
int64_t DecodeKeyParts(int64_t work_items, int64_t longest) {
  constexpr int64_t kPartsPerThread = 8, kMinPartKeys = 256;
  const int64_t wanted = (kPartsPerThread * omp_get_max_threads() + work_items - 1) / work_items;
  return std::clamp<int64_t>(std::min(wanted, longest / kMinPartKeys), 1, kMaxKeyParts);
}

template <typename T>
void AttendBlocks(const Tensor& q, std::span<const int64_t> q_lengths,
                  std::span<const RowBlocksOf<T>> k, std::span<const RowBlocksOf<T>> v,
                  std::span<const int64_t> k_lengths, int64_t num_heads,
                  const ScoreOptions& options, Tensor& out) {
  const int64_t batch = q.dim(0), queries = q.dim(1);
  const int64_t dk = q.dim(2) / num_heads, dv = out.dim(2) / num_heads;
  const int64_t kv_heads = options.kv_heads > 0 ? options.kv_heads : num_heads;
  const int64_t group = num_heads / kv_heads;
  // Query head h of sequence b with its keys and values read in place.
  const auto head_in_place = [&](int64_t b, int64_t h) {
    const int64_t kv = h / group;
    const float* values_in_place = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      if (k_lengths[b] > 0) values_in_place = v[b].blocks[0] + kv * dv;
    }
    return HeadView<T>{q.data() + b * q.stride(0) + h * dk,
                       q.stride(1),
                       k[b],
                       v[b],
                       kv * dk,
                       kv * dv,
                       nullptr,
                       0,
                       values_in_place,
                       v[b].stride,
                       out.data() + b * out.stride(0) + h * dv,
                       out.stride(1),
                       q_lengths[b],
                       k_lengths[b],
                       dk,
                       dv,
                       options.alibi_slopes.empty() ? 0.0f : options.alibi_slopes[h]};
  };
  if (queries <= kFewQueries) {
    const int64_t work = batch * kv_heads * queries;
    const int64_t longest = *std::max_element(k_lengths.begin(), k_lengths.end());
    const int64_t parts = DecodeKeyParts(work, longest);
    const int64_t partial_floats = group * dv;
    thread_local std::vector<PartialAttention> partials;
    thread_local std::vector<float> partial_values;
    partials.resize(parts == 1 ? 0 : work * parts * group);
    partial_values.resize(parts == 1 ? 0 : work * parts * partial_floats);
    PartialAttention* all_partials = partials.data();
    float* all_values = partial_values.data();
    // Work item `item`: query i of sequence b with the query heads of key/value head kv.
    struct GroupQuery {
      int64_t i, b, kv;
    };
    const auto group_query = [&](int64_t item) {
      return GroupQuery{item % queries, item / queries / kv_heads, item / queries % kv_heads};
    };
    const auto output_row = [&](const GroupQuery& q, int64_t g) {
      return out.data() + q.b * out.stride(0) + q.i * out.stride(1) + (q.kv * group + g) * dv;
    };
    ParallelFor(
        work * parts,
        [&](int64_t index) {
          const int64_t part = index % parts;
          const GroupQuery query = group_query(index / parts);
          const auto [i, b, kv] = query;
          if (i >= q_lengths[b]) {
            if (part > 0) return;
            for (int64_t g = 0; g < group; ++g) std::fill_n(output_row(query, g), dv, 0.0f);
            return;
          }
          thread_local std::vector<HeadView<T>> heads;
          heads.clear();
          for (int64_t g = 0; g < group; ++g) heads.push_back(head_in_place(b, kv * group + g));
          thread_local std::vector<float> scores;
          scores.resize(group * std::max<int64_t>(k_lengths[b], 1));
          const KeyRange range = KeysSeenAt(k_lengths[b] - q_lengths[b] + i, k_lengths[b], options);
          if (parts == 1) {
            AttendQueriesInPlace(heads.data(), group, i, options, range, scores.data(), nullptr);
            return;
          }
          // Part boundaries on whole chunks, so that the chunks read stay those of one part.
          const int64_t chunks = (range.end - range.begin + kChunkRows - 1) / kChunkRows;
          const KeyRange piece{
              std::min(range.end, range.begin + chunks * part / parts * kChunkRows),
              std::min(range.end, range.begin + chunks * (part + 1) / parts * kChunkRows)};
          PartialAttention* mine = all_partials + index * group;
          for (int64_t g = 0; g < group; ++g) {
            mine[g].values = all_values + index * partial_floats + g * dv;
          }
          AttendQueriesInPlace(heads.data(), group, i, options, piece, scores.data(), mine);
        },
        Schedule::kDynamic);
    if (parts == 1) return;
    ParallelFor(
        work * group,
        [&](int64_t index) {
          const int64_t g = index % group, item = index / group;
          const GroupQuery query = group_query(item);
          if (query.i >= q_lengths[query.b]) return;
          MergePartials(all_partials + item * parts * group + g, parts, group, dv,
                        output_row(query, g));
        },
        Schedule::kStatic, work * group * parts * dv >= 1 << 14);
    return;
  }
  const PackedKeysValues packed = Pack<T>(k, v, k_lengths, kv_heads, dk, dv);
  const int64_t blocks = (queries + kQueryBlock - 1) / kQueryBlock;
  const std::vector<float> zero_query(dk, 0.0f);

  ParallelFor(
      batch * num_heads * blocks,
      [&](int64_t index) {
        const int64_t bh = index / blocks, block = index % blocks;
        const int64_t b = bh / num_heads, h = bh % num_heads;
        const int64_t packed_head = b * kv_heads + h / group;
        // Each thread's score rows, reused across calls.
        thread_local std::vector<float> scores;
        scores.resize(kRows * packed.keys_padded);
        HeadView<T> head = head_in_place(b, h);
        head.keys = packed.keys_transposed.data() + packed_head * dk * packed.keys_padded;
        head.key_stride = packed.keys_padded;
        if (!packed.values_copy.empty()) {
          head.values = packed.values_copy.data() + packed_head * packed.keys * packed.dv_padded;
          head.value_stride = packed.dv_padded;
        }
        const int64_t end = std::min(queries, (block + 1) * kQueryBlock);
        for (int64_t i0 = block * kQueryBlock; i0 < end; i0 += kRows) {
          AttendQueryGroup(head, i0, end, options, zero_query.data(), scores.data());
        }
      },
      Schedule::kDynamic);
}

}  // namespace

void ScaledDotProductAttention(const Tensor& q, std::span<const int64_t> q_lengths, const Tensor& k,
                               const Tensor& v, std::span<const int64_t> k_lengths,
                               int64_t num_heads, const ScoreOptions& options, Tensor& out) {
  const int64_t batch = q.dim(0);
  std::vector<const float*> bases(2 * batch);
  std::vector<RowBlocks> keys, values;
  for (int64_t b = 0; b < batch; ++b) {
    bases[2 * b] = k.data() + b * k.stride(0);
    bases[2 * b + 1] = v.data() + b * v.stride(0);
    keys.push_back({&bases[2 * b], INT64_MAX, k.stride(1)});
    values.push_back({&bases[2 * b + 1], INT64_MAX, v.stride(1)});
  }
  ScaledDotProductAttention(q, q_lengths, keys, values, k_lengths, num_heads, options, out);
}

void ScaledDotProductAttention(const Tensor& q, std::span<const int64_t> q_lengths,
                               std::span<const RowBlocks> keys, std::span<const RowBlocks> values,
                               std::span<const int64_t> k_lengths, int64_t num_heads,
                               const ScoreOptions& options, Tensor& out) {
  AttendBlocks(q, q_lengths, keys, values, k_lengths, num_heads, options, out);
}

void ScaledDotProductAttention(const Tensor& q, std::span<const int64_t> q_lengths,
                               std::span<const HalfRowBlocks> keys,
                               std::span<const HalfRowBlocks> values,
                               std::span<const int64_t> k_lengths, int64_t num_heads,
                               const ScoreOptions& options, Tensor& out) {
  AttendBlocks(q, q_lengths, keys, values, k_lengths, num_heads, options, out);
}

void ScaledDotProductAttention(const Tensor& q, std::span<const int64_t> q_lengths,
                               std::span<const Bf16RowBlocks> keys,
                               std::span<const Bf16RowBlocks> values,
                               std::span<const int64_t> k_lengths, int64_t num_heads,
                               const ScoreOptions& options, Tensor& out) {
  AttendBlocks(q, q_lengths, keys, values, k_lengths, num_heads, options, out);
}

}  // namespace attnserve
