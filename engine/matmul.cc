#include "engine/matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <shared_mutex>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/bf16.h"
#include "engine/dnnl_context.h"
#include "engine/kernels/few_rows_linear.h"
#include "engine/kernels/kernel_isa.h"
#include "engine/parallel.h"
#include "engine/weight_grid.h"
#include "engine/weight_memory.h"

namespace attnserve {
namespace {

using dnnl::memory;

// rows = 0: a runtime row count, plain weights ([N, K] rows of ldw floats, or with k_major
// Wᵀ [K, N] in rows of ldw floats); rows > 0: that many rows, packed weights. bf16: x and the
// packed weights in bfloat16 (y stays float).
struct MatmulKey {
  int64_t rows, k, n, lda, ldw, ldc;
  bool has_bias;
  MatmulEpilogue epilogue;
  bool k_major = false;
  bool bf16 = false;

  bool packed() const { return rows > 0; }
  memory::data_type operand_type() const {
    return bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  }
  auto Tie() const {
    return std::tie(rows, k, n, lda, ldw, ldc, has_bias, epilogue.accumulate, epilogue.activation,
                    k_major, bf16);
  }
  bool operator<(const MatmulKey& other) const { return Tie() < other.Tie(); }
  std::string ToString() const {
    return absl::StrCat(packed() ? absl::StrCat("rows=", rows, " packed ") : "", "k=", k, " n=", n,
                        " lda=", lda, " ldw=", ldw, " ldc=", ldc, " bias=", has_bias,
                        " activation=", static_cast<int>(epilogue.activation),
                        " accumulate=", epilogue.accumulate, k_major ? " k_major" : "",
                        bf16 ? " bf16" : "");
  }
};

memory::desc WeightsDesc(const MatmulKey& key) {
  // Packed: oneDNN's BA16a64b (see PackedWeight), BA16a64b2a in bf16. Plain: Wᵀ viewed in
  // place, element (k, n) of the [K, N] operand at n * ldw + k, or at k * ldw + n when k-major.
  if (key.packed()) {
    return memory::desc({key.k, key.n}, key.operand_type(),
                        key.bf16 ? memory::format_tag::BA16a64b2a : memory::format_tag::BA16a64b);
  }
  return memory::desc({key.k, key.n}, memory::data_type::f32,
                      key.k_major ? memory::dims{key.ldw, 1} : memory::dims{1, key.ldw});
}

struct CachedMatmul {
  dnnl::matmul primitive;
  std::string implementation;
  memory::desc scratchpad;  // the caller's: one primitive may run on several threads at once
};

dnnl::algorithm EltwiseAlgorithm(Activation activation) {
  switch (activation) {
    case Activation::kRelu:
      return dnnl::algorithm::eltwise_relu;
    case Activation::kGeluErf:
      return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::kGeluTanh:
      return dnnl::algorithm::eltwise_gelu_tanh;
    case Activation::kSilu:
      return dnnl::algorithm::eltwise_swish;
    case Activation::kNone:
      break;
  }
  return dnnl::algorithm::undef;
}

CachedMatmul CreateMatmul(const MatmulKey& key) {
  const memory::dim rows = key.packed() ? key.rows : DNNL_RUNTIME_DIM_VAL;
  memory::desc src({rows, key.k}, key.operand_type(), {key.lda, 1});
  memory::desc weights = WeightsDesc(key);
  memory::desc dst({rows, key.n}, memory::data_type::f32, {key.ldc, 1});
  memory::desc bias =
      key.has_bias ? memory::desc({1, key.n}, memory::data_type::f32, {key.n, 1}) : memory::desc();

  dnnl::post_ops post_ops;
  if (key.epilogue.activation != Activation::kNone) {
    // alpha: swish's β (x · sigmoid(β x)); relu's negative slope, 0.
    const float alpha = key.epilogue.activation == Activation::kSilu ? 1.0f : 0.0f;
    post_ops.append_eltwise(1.0f, EltwiseAlgorithm(key.epilogue.activation), alpha, 0.0f);
  }
  if (key.epilogue.accumulate) post_ops.append_sum(1.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(post_ops);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  dnnl::matmul::desc desc = key.has_bias ? dnnl::matmul::desc(src, weights, bias, dst)
                                         : dnnl::matmul::desc(src, weights, dst);
  dnnl::matmul::primitive_desc primitive_desc(desc, attr, DnnlEngine());
  return {dnnl::matmul(primitive_desc), primitive_desc.impl_info_str(),
          primitive_desc.scratchpad_desc()};
}

class MatmulCache {
 public:
  static MatmulCache& Get() {
    static auto* cache = new MatmulCache();
    return *cache;
  }

  const CachedMatmul& Lookup(const MatmulKey& key) {
    {
      std::shared_lock lock(mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end()) return *it->second;
    }
    // Creation takes milliseconds; do it outside the lock, keep the first one inserted.
    auto created = std::make_unique<CachedMatmul>(CreateMatmul(key));
    std::lock_guard lock(mutex_);
    auto [it, inserted] = entries_.try_emplace(key, std::move(created));
    return *it->second;
  }

  std::vector<PrimitiveInfo> List() {
    std::shared_lock lock(mutex_);
    std::vector<PrimitiveInfo> list;
    for (const auto& [key, entry] : entries_)
      list.push_back({key.ToString(), entry->implementation});
    return list;
  }

 private:
  std::shared_mutex mutex_;  // guards entries_
  std::map<MatmulKey, std::unique_ptr<CachedMatmul>> entries_;
};

bool RowsAreDense(const Tensor& t) { return t.rank() == 2 && t.stride(1) == 1; }

// The calling thread's buffer `slot` of at least `bytes`, kept for the thread's life.
enum ScratchSlot { kTileSlot, kBf16InputSlot, kOneDnnSlot, kScratchSlots };
void* ThreadScratch(ScratchSlot slot, int64_t bytes) {
  thread_local std::shared_ptr<void> buffers[kScratchSlots];
  thread_local int64_t capacities[kScratchSlots] = {};
  if (capacities[slot] < bytes) {
    buffers[slot] = AllocateWeightMemory(static_cast<size_t>(bytes));
    capacities[slot] = bytes;
  }
  return buffers[slot].get();
}

// `rows` rows of x (from x_rows, lda apart) into as many rows of y (ldc apart) through the
// primitive for `key`.
void ExecuteMatmul(const MatmulKey& key, int64_t rows, const void* x_rows, const void* weights_data,
                   const Tensor& bias, float* y_rows) {
  const CachedMatmul& matmul = MatmulCache::Get().Lookup(key);
  dnnl::engine& engine = DnnlEngine();
  memory src(memory::desc({rows, key.k}, key.operand_type(), {key.lda, 1}), engine,
             const_cast<void*>(x_rows));
  memory weights(WeightsDesc(key), engine, const_cast<void*>(weights_data));
  memory dst(memory::desc({rows, key.n}, memory::data_type::f32, {key.ldc, 1}), engine, y_rows);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  if (const size_t bytes = matmul.scratchpad.get_size(); bytes > 0) {
    args.emplace(
        DNNL_ARG_SCRATCHPAD,
        memory(matmul.scratchpad, engine, ThreadScratch(kOneDnnSlot, static_cast<int64_t>(bytes))));
  }
  if (!bias.empty()) {
    args.emplace(DNNL_ARG_BIAS, memory(memory::desc({1, key.n}, memory::data_type::f32, {key.n, 1}),
                                       engine, const_cast<float*>(bias.data())));
  }
  matmul.primitive.execute(DnnlStream(), args);
}

// Packed weights: fixed row counts from a bounded set, the largest power of two up to 512 that
// fits and the last 1-7 rows as they come. Each chunk runs at full speed (brgemm keeps ~210
// GFLOP/s down to 5 rows), and at most 14 primitives per weight shape are ever created. oneDNN
// 2.6 has no brgemm for a strided output (it falls to ref:any), so a strided y is written
// through a dense chunk of rows.
// x: m rows, key.lda elements apart, of key.operand_type(); weights: packed in that type.
void PackedMatmul(MatmulKey key, int64_t m, const void* x, const void* weights, const Tensor& bias,
                  Tensor& y) {
  const int64_t ldc = key.ldc;
  const int64_t x_row_bytes = key.lda * (key.bf16 ? 2 : 4);
  key.ldc = key.n;
  for (int64_t first = 0; first < m;) {
    const void* x_rows = static_cast<const std::byte*>(x) + first * x_row_bytes;
    int64_t rows = m - first;
    if (rows >= 8) {
      rows = 8;
      while (rows < 512 && rows * 2 <= m - first) rows *= 2;
    }
    key.rows = rows;
    if (ldc == key.n) {
      ExecuteMatmul(key, rows, x_rows, weights, bias, y.row(first));
    } else {
      Tensor dense({rows, key.n});
      for (int64_t r = 0; r < rows && key.epilogue.accumulate; ++r) {
        std::memcpy(dense.row(r), y.row(first + r), key.n * sizeof(float));
      }
      ExecuteMatmul(key, rows, x_rows, weights, bias, dense.data());
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(y.row(first + r), dense.row(r), key.n * sizeof(float));
      }
    }
    first += rows;
  }
}

// x [m, k] rounded to bfloat16 in rows of `depth` (zero past k), in the calling thread's buffer.
const uint16_t* RowsInBf16(const Tensor& x, int64_t depth) {
  const int64_t m = x.dim(0), k = x.dim(1);
  auto* x_bf16 = static_cast<uint16_t*>(ThreadScratch(kBf16InputSlot, m * depth * 2));
  ParallelFor(
      m,
      [&](int64_t r) {
        const float* row = x.row(r);
        uint16_t* out = x_bf16 + r * depth;
#pragma omp simd
        for (int64_t i = 0; i < k; ++i) out[i] = ToBf16(row[i]);
        std::fill(out + k, out + depth, uint16_t{0});
      },
      Schedule::kStatic, m * k >= 1 << 14);
  return x_bf16;
}

// Only on AMX: oneDNN's bf16 brgemm without it (AVX512_BF16 dot products) took SmolLM2 int4's
// 128- and 512-token prompts 1.6x as long as float32 tiles on a CPU without AMX
// (docs/benchmarks.md, "Prefill without AMX").
bool Bf16MatmulIsFaster() {
  const char* setting = std::getenv("ATTNSERVE_BF16");
  if (setting != nullptr && std::string(setting) == "0") return false;
  return BestKernelIsa() >= KernelIsa::kAvx512 && PackedWeight::PackingIsFaster() &&
         MatmulPicksPackedBrgemm(memory::data_type::bf16, memory::format_tag::BA16a64b2a) &&
         MatmulImplementation(memory::data_type::bf16).find("amx") != std::string::npos;
}

Int8TileFormat BestInt8TileFormatUncached() {
  if (Bf16MatmulIsFaster()) return Int8TileFormat::kBf16Packed;
  return PackedWeight::PackingIsFaster() ? Int8TileFormat::kFloatPacked
                                         : Int8TileFormat::kFloatKMajor;
}

}  // namespace

// Int8 weights for many rows: the matmul is compute-bound there, so the panels are dequantized
// into tiles and oneDNN multiplies all rows by each. Dequantizing costs one pass over the int8
// weights and one write of the tile, against M passes of multiply-adds.
void QuantizedMatmul(const Tensor& x, const QuantizedWeight& q, const Tensor& bias, Tensor& y,
                     MatmulEpilogue epilogue, Int8TileFormat format) {
  const int64_t m = x.dim(0), k = q.k(), n = q.n(), width = QuantizedWeight::kPanelWidth;
  const bool bf16 = format == Int8TileFormat::kBf16Packed;
  const bool packed = format != Int8TileFormat::kFloatKMajor;
  // oneDNN's bf16 brgemm reads K in steps of 32 (it read past a depth of 13 blocks of 16), so in
  // bf16 the depth is padded to 32 with zeros, in x's copy and in the tiles alike.
  const int64_t depth = bf16 ? (k + 31) / 32 * 32 : k;
  const int64_t padded_k = PackedWeight::PaddedDepth(depth);
  const int64_t panel_bytes = (packed ? padded_k : k) * width * (bf16 ? 2 : 4);
  const void* x_operand =
      bf16 ? static_cast<const void*>(RowsInBf16(x, depth)) : static_cast<const void*>(x.data());
  const int64_t lda = bf16 ? depth : x.stride(0);
  // Tiles of about kDequantizedTileBytes, as many for each thread.
  const int64_t threads = omp_get_max_threads();
  const int64_t tiles_per_thread =
      std::max<int64_t>(1, (q.panels() * panel_bytes + threads * kDequantizedTileBytes - 1) /
                               (threads * kDequantizedTileBytes));
  const int64_t tile_panels =
      (q.panels() + threads * tiles_per_thread - 1) / (threads * tiles_per_thread);
  const int64_t tiles = (q.panels() + tile_panels - 1) / tile_panels;
  ParallelFor(
      tiles,
      [&](int64_t t) {
        void* tile = ThreadScratch(kTileSlot, tile_panels * panel_bytes);
        const int64_t first = t * tile_panels;
        const int64_t last = std::min(q.panels(), first + tile_panels);
        const int64_t begin = first * width, columns = std::min(n, last * width) - begin;
        Tensor y_columns = y.Slice(1, begin, columns);
        const Tensor bias_columns = bias.empty() ? Tensor() : bias.Slice(0, begin, columns);
        MatmulKey key{0, depth, columns, lda, 0, y.stride(0), !bias.empty(), epilogue};
        key.bf16 = bf16;
        if (bf16) {
          q.DequantizePanelsBf16(first, last, padded_k, static_cast<uint16_t*>(tile));
          PackedMatmul(key, m, x_operand, tile, bias_columns, y_columns);
        } else if (packed) {
          q.DequantizePanels(first, last, padded_k, static_cast<float*>(tile));
          PackedMatmul(key, m, x_operand, tile, bias_columns, y_columns);
        } else {
          key.ldw = (last - first) * width;
          key.k_major = true;
          q.DequantizeColumns(first, last, static_cast<float*>(tile), key.ldw);
          ExecuteMatmul(key, m, x_operand, tile, bias_columns, y_columns.data());
        }
      },
      Schedule::kDynamic);
}

namespace {

absl::Status LinearWith(const Tensor& x, const LinearWeights& w, Tensor& y,
                        MatmulEpilogue epilogue) {
  if (!w.parts.empty()) {
    if (!RowsAreDense(y) || y.dim(0) != x.dim(0) || y.dim(1) != w.out_features()) {
      return absl::InvalidArgumentError(absl::StrCat("Linear: y ", y.ShapeString(), " is not [",
                                                     x.dim(0), ", ", w.out_features(), "]"));
    }
    int64_t column = 0;
    for (const LinearWeights& part : w.parts) {
      Tensor columns = y.Slice(1, column, part.out_features());
      RETURN_IF_ERROR(LinearWith(x, part, columns, epilogue));
      column += part.out_features();
    }
    return absl::OkStatus();
  }
  const Tensor& weight = w.weight;
  const Tensor& bias = w.bias;
  const PackedWeight& packed = w.packed;
  const bool plain = !weight.empty();
  if (!RowsAreDense(x) || (plain && !RowsAreDense(weight)) || !RowsAreDense(y) || w.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: operands must be 2-D with unit inner stride; x ", x.ShapeString(),
                     ", weight ", weight.ShapeString(), ", y ", y.ShapeString()));
  }
  const int64_t m = x.dim(0), k = x.dim(1), n = w.out_features();
  if (w.in_features() != k || y.dim(0) != m || y.dim(1) != n ||
      (!bias.empty() && (bias.size() != n || !bias.is_contiguous())) ||
      (plain && (weight.dim(0) != n || weight.dim(1) != k))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Linear: shapes disagree: x ", x.ShapeString(), ", weight ", weight.ShapeString(),
        packed.empty() ? "" : absl::StrCat(" (packed [", packed.n(), ", ", packed.k(), "])"),
        w.quantized.empty() ? ""
                            : absl::StrCat(" (int", w.quantized.bits(), " [", w.quantized.n(), ", ",
                                           w.quantized.k(), "])"),
        ", bias ", bias.ShapeString(), ", y ", y.ShapeString()));
  }
  if (m == 0) return absl::OkStatus();
  if (!w.bf16.empty()) {
    const int64_t depth = w.bf16.padded_k();
    MatmulKey key{0, depth, n, depth, 0, y.stride(0), !bias.empty(), epilogue};
    key.bf16 = true;
    PackedMatmul(key, m, RowsInBf16(x, depth), w.bf16.data(), bias, y);
    return absl::OkStatus();
  }
  if (!w.quantized.empty() && FewRowsKernelTakes(w.quantized, m)) {
    FewRowsLinear(x, w.quantized, bias, y, epilogue);
    return absl::OkStatus();
  }
  if (m <= kFewRowsMax) {
    if (!packed.empty()) {
      FewRowsLinear(x, packed, bias, y, epilogue);
    } else {
      FewRowsLinear(x, weight, bias, y, epilogue);
    }
    return absl::OkStatus();
  }
  if (!w.quantized.empty()) {
    QuantizedMatmul(x, w.quantized, bias, y, epilogue, BestInt8TileFormat());
    return absl::OkStatus();
  }
  MatmulKey key{
      0, k, n, x.stride(0), plain ? weight.stride(0) : k, y.stride(0), !bias.empty(), epilogue};
  if (packed.empty()) {
    ExecuteMatmul(key, m, x.data(), weight.data(), bias, y.data());
  } else {
    PackedMatmul(key, m, x.data(), packed.data(), bias, y);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y,
                    MatmulEpilogue epilogue) {
  return LinearWith(x, LinearWeights{weight, bias, {}, {}}, y, epilogue);
}

namespace {

// PrepareLinear of `weight`, the rows of `parts` (none: itself) stacked.
LinearWeights Prepare(Tensor weight, const std::vector<const Tensor*>& parts, Tensor bias,
                      const WeightFormat& format) {
  if (format.quantized && parts.size() > 1 && KeptAsParts(parts, format)) {
    LinearWeights stacked;
    int64_t row = 0;
    for (const Tensor* part : parts) {
      stacked.parts.push_back(
          LinearWeights{Tensor(),
                        bias.empty() ? Tensor() : bias.Slice(0, row, part->dim(0)),
                        {},
                        QuantizedForLoad(*part, {part}, format)});
      row += part->dim(0);
    }
    return stacked;
  }
  if (format.quantized) {
    const std::vector<const Tensor*> whole =
        parts.empty() ? std::vector<const Tensor*>{&weight} : parts;
    return LinearWeights{Tensor(), std::move(bias), {}, QuantizedForLoad(weight, whole, format)};
  }
  if (format.bf16 && Bf16WeightsTakeAmx()) {
    return LinearWeights{Tensor(), std::move(bias), {}, {}, Bf16Weight::Pack(weight)};
  }
  if (format.bf16) weight = RoundedToBf16(weight);
  PackedWeight packed = PackedWeight::PackIfFaster(weight);
  if (!packed.empty()) weight = Tensor();
  return LinearWeights{std::move(weight), std::move(bias), std::move(packed), {}};
}

}  // namespace

int64_t LinearWeights::out_features() const {
  if (!parts.empty()) {
    int64_t n = 0;
    for (const LinearWeights& part : parts) n += part.out_features();
    return n;
  }
  return !quantized.empty() ? quantized.n()
         : !bf16.empty()    ? bf16.n()
         : packed.empty()   ? weight.dim(0)
                            : packed.n();
}

int64_t LinearWeights::in_features() const {
  if (!parts.empty()) return parts[0].in_features();
  return !quantized.empty() ? quantized.k()
         : !bf16.empty()    ? bf16.k()
         : packed.empty()   ? weight.dim(1)
                            : packed.k();
}

Tensor LinearWeights::PlainWeight() const {
  if (!parts.empty()) {
    Tensor out({out_features(), in_features()});
    int64_t row = 0;
    for (const LinearWeights& part : parts) {
      const Tensor plain = part.PlainWeight();
      for (int64_t r = 0; r < plain.dim(0); ++r) {
        std::copy_n(plain.row(r), plain.dim(1), out.row(row++));
      }
    }
    return out;
  }
  return !quantized.empty() ? quantized.Dequantize()
         : !bf16.empty()    ? bf16.Unpack()
         : packed.empty()   ? weight
                            : packed.Unpack();
}

LinearWeights PrepareLinear(Tensor weight, Tensor bias, const WeightFormat& format) {
  return Prepare(std::move(weight), {}, std::move(bias), format);
}

namespace {

// Weight matrices stacked by rows into one: a view when they lie back to back in one file
// mapping (as the exporter writes them), else a copy. Biases likewise, zero where a part has none
// (empty when no part has one).
Tensor Stack(const std::vector<const Tensor*>& parts) {
  if (Tensor view = Tensor::StackedView(parts); !view.empty()) return view;
  Shape shape = parts[0]->shape();
  shape[0] = 0;
  for (const Tensor* part : parts) shape[0] += part->dim(0);
  Tensor stacked = Tensor::Zeros(shape);
  float* out = stacked.data();
  for (const Tensor* part : parts) {
    std::memcpy(out, part->data(), part->size() * sizeof(float));
    out += part->size();
  }
  return stacked;
}

Tensor StackBiases(const std::vector<const Tensor*>& biases,
                   const std::vector<const Tensor*>& weights) {
  if (std::all_of(biases.begin(), biases.end(), [](const Tensor* b) { return b->empty(); })) {
    return Tensor();
  }
  if (Tensor view = Tensor::StackedView(biases); !view.empty()) return view;
  Tensor stacked = Tensor::Zeros(
      {std::accumulate(weights.begin(), weights.end(), int64_t{0},
                       [](int64_t rows, const Tensor* w) { return rows + w->dim(0); })});
  int64_t row = 0;
  for (size_t i = 0; i < biases.size(); ++i) {
    if (!biases[i]->empty()) {
      std::memcpy(stacked.data() + row, biases[i]->data(), biases[i]->size() * sizeof(float));
    }
    row += weights[i]->dim(0);
  }
  return stacked;
}

}  // namespace

LinearWeights PrepareStackedLinear(const std::vector<const Tensor*>& weights,
                                   const std::vector<const Tensor*>& biases,
                                   const WeightFormat& format) {
  return Prepare(Stack(weights), weights, StackBiases(biases, weights), format);
}

absl::Status Linear(const Tensor& x, const LinearWeights& linear, Tensor& y,
                    MatmulEpilogue epilogue) {
  return LinearWith(x, linear, y, epilogue);
}

absl::StatusOr<Tensor> LinearRows(const Tensor& x, const LinearWeights& linear,
                                  MatmulEpilogue epilogue) {
  Shape shape = x.shape();
  shape.back() = linear.out_features();
  Tensor y(shape);
  Tensor y_rows = y.FlattenRows();
  RETURN_IF_ERROR(Linear(x.FlattenRows(), linear, y_rows, epilogue));
  return y;
}

absl::StatusOr<Tensor> LinearRows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  MatmulEpilogue epilogue) {
  return LinearRows(x, LinearWeights{weight, bias, {}, {}}, epilogue);
}

std::vector<PrimitiveInfo> CreatedMatmulPrimitives() { return MatmulCache::Get().List(); }

// Without AMX (the tiles in float32), int8 activations times the weights as stored through VNNI
// beat dequantizing them into tiles at every row count: SmolLM2 int4's prefill of 128 and 512
// tokens took 1.8x and 1.6x less time (docs/benchmarks.md, "Prefill without AMX"), at the
// accuracy a prompt fed in chunks of 32 rows already had. AVX2's VPMADDUBSW does not beat float
// tiles from 128 rows on.
bool FewRowsKernelTakes(const QuantizedWeight& q, int64_t m) {
  return m <= FewRowsMax(q) ||
         (BestKernelIsa() == KernelIsa::kAvx512Vnni && UsesInt8Activations(q) &&
          BestInt8TileFormat() != Int8TileFormat::kBf16Packed);
}

Int8TileFormat BestInt8TileFormat() {
  static const Int8TileFormat format = BestInt8TileFormatUncached();
  return format;
}

const char* Int8TileFormatName(Int8TileFormat format) {
  switch (format) {
    case Int8TileFormat::kFloatKMajor:
      return "float32";
    case Int8TileFormat::kFloatPacked:
      return "float32 packed";
    case Int8TileFormat::kBf16Packed:
      return "bf16 packed";
  }
  return "?";
}

}  // namespace attnserve
