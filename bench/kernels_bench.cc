// Micro-benchmarks of the engine's kernels and attention variants, with achieved GFLOP/s.
// Run through bench/run_kernel_bench.sh, which also measures PyTorch in the same run.
#include <benchmark/benchmark.h>

#include <cstring>
#include <dnnl.hpp>
#include <random>

#include "engine/attention/multi_head.h"
#include "engine/attention/pointer.h"
#include "engine/attention/scaled_dot_product.h"
#include "engine/attention/simple_self.h"
#include "engine/dnnl_context.h"
#include "engine/kernels/normalization.h"
#include "engine/kernels/softmax.h"
#include "engine/matmul.h"

namespace attnserve {
namespace {

Tensor Random(Shape shape, float scale = 1.0f) {
  Tensor t(std::move(shape));
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, scale);
  for (int64_t i = 0; i < t.size(); ++i) t.data()[i] = normal(rng);
  return t;
}

void SetGflops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Linear(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const Tensor x = Random({m, k}), w = Random({n, k}), b = Random({n});
  Tensor y({m, n});
  for (auto _ : state) {
    benchmark::DoNotOptimize(Linear(x, w, b, y));
  }
  SetGflops(state, 2.0 * m * k * n);
}
BENCHMARK(BM_Linear)
    ->Args({128, 768, 2304})
    ->Args({512, 768, 768})
    ->Args({512, 768, 3072})
    ->Args({2048, 2048, 2048})
    ->Unit(benchmark::kMillisecond);

// Decoding's matmul: one row against weights that are not in cache, as when a step streams
// every layer's weights in turn. The weights rotate through copies totalling far more than the
// last-level cache, so this measures reading them from memory (bytes/s beside the GFLOP/s).
void BM_LinearOneRowFromMemory(benchmark::State& state) {
  const int64_t k = state.range(0), n = state.range(1);
  const int64_t copies = std::max<int64_t>(2, (256ll << 20) / (k * n * 4));
  std::vector<Tensor> weights;
  for (int64_t c = 0; c < copies; ++c) weights.push_back(Random({n, k}));
  const Tensor x = Random({1, k}), b = Random({n});
  Tensor y({1, n});
  int64_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(Linear(x, weights[next], b, y));
    next = (next + 1) % copies;
  }
  SetGflops(state, 2.0 * k * n);
  state.SetBytesProcessed(state.iterations() * k * n * 4);
}
BENCHMARK(BM_LinearOneRowFromMemory)
    ->Args({768, 2304})
    ->Args({768, 3072})
    ->Args({3072, 768})
    ->Args({768, 50257})
    ->Unit(benchmark::kMillisecond);

// The same from quantized weights, for 1-4 rows. ATTNSERVE_MAX_ISA=avx2 runs the AVX2 kernels on
// AVX-512 CPUs, =avx512 the float-activation ones on VNNI CPUs.
void QuantizedLinearFromMemory(benchmark::State& state, const WeightFormat& format) {
  const int64_t k = state.range(0), n = state.range(1), m = state.range(2);
  const int64_t copies = std::max<int64_t>(2, (256ll << 20) / (k * n));
  std::vector<LinearWeights> weights;
  for (int64_t c = 0; c < copies; ++c) {
    weights.push_back(PrepareLinear(Random({n, k}), Random({n}), format));
  }
  const Tensor x = Random({m, k});
  Tensor y({m, n});
  int64_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(Linear(x, weights[next], y));
    next = (next + 1) % copies;
  }
  SetGflops(state, 2.0 * m * k * n);
  state.SetBytesProcessed(state.iterations() * weights[0].quantized.bytes());
}
// Int8, the group size in range 3 (0: one scale per output column): a quarter of the bytes.
void BM_Int8LinearFromMemory(benchmark::State& state) {
  QuantizedLinearFromMemory(state, {.quantized = true, .group_size = state.range(3)});
}
BENCHMARK(BM_Int8LinearFromMemory)
    ->Args({768, 2304, 1, 0})
    ->Args({768, 3072, 1, 0})
    ->Args({3072, 768, 1, 0})
    ->Args({768, 50257, 1, 0})
    ->Args({768, 3072, 1, 32})
    ->Args({768, 3072, 1, 128})
    ->Args({768, 3072, 4, 0})
    ->Unit(benchmark::kMillisecond);
// Int4: 5 bits a weight.
void BM_Int4LinearFromMemory(benchmark::State& state) {
  QuantizedLinearFromMemory(state, {.quantized = true, .bits = 4});
}
BENCHMARK(BM_Int4LinearFromMemory)
    ->Args({768, 3072, 1})
    ->Args({3072, 768, 1})
    ->Args({768, 50257, 1})
    ->Args({768, 3072, 4})
    ->Args({768, 3072, 16})
    ->Unit(benchmark::kMillisecond);

// Prefill's matmul from the weights as a model keeps them (range 3: 0 float32, packed where
// that is faster; else int8 with that group size, -1 for one scale per output column).
void BM_PreparedLinear(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const WeightFormat format{.quantized = state.range(3) != 0,
                            .group_size = std::max<int64_t>(0, state.range(3))};
  const LinearWeights linear = PrepareLinear(Random({n, k}), Random({n}), format);
  const Tensor x = Random({m, k});
  Tensor y({m, n});
  for (auto _ : state) benchmark::DoNotOptimize(Linear(x, linear, y));
  SetGflops(state, 2.0 * m * k * n);
}
BENCHMARK(BM_PreparedLinear)
    ->Args({32, 768, 3072, 0})
    ->Args({32, 768, 3072, -1})
    ->Args({128, 768, 3072, 0})
    ->Args({128, 768, 3072, -1})
    ->Args({512, 768, 3072, 0})
    ->Args({512, 768, 3072, -1})
    ->Args({128, 3072, 768, 0})
    ->Args({128, 3072, 768, -1})
    ->Args({128, 768, 640, 0})
    ->Args({128, 768, 1280, 0})
    ->Unit(benchmark::kMillisecond);

// What oneDNN 2.6 offers a prefill beyond float32, measured to choose int8's prefill path (issue
// 21): the same [M, K] x [K, N] matmul with f32, bf16 (where the CPU has AVX512_BF16) and
// u8 x s8 -> s32 operands (range 3: 0, 1, 2), weights in the layout oneDNN picks, a fixed M.
// The activations' quantization (bf16 rounding, or u8 with a scale) is not timed.
void BM_OneDnnMatmulByType(benchmark::State& state) {
  using dnnl::memory;
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const memory::data_type types[][3] = {
      {memory::data_type::f32, memory::data_type::f32, memory::data_type::f32},
      {memory::data_type::bf16, memory::data_type::bf16, memory::data_type::f32},
      {memory::data_type::u8, memory::data_type::s8, memory::data_type::s32}};
  const auto& [src_type, weight_type, dst_type] = types[state.range(3)];
  const memory::desc src({m, k}, src_type, memory::format_tag::ab);
  const memory::desc weights({k, n}, weight_type, memory::format_tag::any);
  const memory::desc dst({m, n}, dst_type, memory::format_tag::ab);
  dnnl::matmul::primitive_desc desc;
  try {
    desc = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), DnnlEngine());
  } catch (const dnnl::error&) {
    state.SkipWithError("oneDNN has no kernel for these types on this CPU");
    return;
  }
  state.SetLabel(desc.impl_info_str());
  memory src_memory(src, DnnlEngine()), weight_memory(desc.weights_desc(), DnnlEngine()),
      dst_memory(dst, DnnlEngine());
  std::memset(src_memory.get_data_handle(), 0, src.get_size());
  std::memset(weight_memory.get_data_handle(), 0, desc.weights_desc().get_size());
  const dnnl::matmul matmul(desc);
  for (auto _ : state) {
    matmul.execute(DnnlStream(), {{DNNL_ARG_SRC, src_memory},
                                  {DNNL_ARG_WEIGHTS, weight_memory},
                                  {DNNL_ARG_DST, dst_memory}});
  }
  SetGflops(state, 2.0 * m * k * n);
}
BENCHMARK(BM_OneDnnMatmulByType)
    ->ArgsProduct({{32, 128, 512}, {768}, {3072}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond);

void BM_Softmax(benchmark::State& state) {
  const int64_t rows = state.range(0), width = state.range(1);
  const Tensor source = Random({rows, width}, 5.0f);
  Tensor x = source.Clone();
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) MaskedSoftmaxRow(x.row(r), width, width);
  }
  state.SetItemsProcessed(state.iterations() * rows * width);
}
BENCHMARK(BM_Softmax)->Args({512, 512})->Args({12, 2048});

template <int kKind>
void BM_Norm(benchmark::State& state) {
  const int64_t rows = state.range(0), dim = state.range(1);
  const Tensor x = Random({rows, dim}), gamma = Random({dim}), beta = Random({dim});
  Tensor y({rows, dim});
  for (auto _ : state) {
    if constexpr (kKind == 0) benchmark::DoNotOptimize(LayerNorm(x, gamma, beta, 1e-5f, y));
    if constexpr (kKind == 1) benchmark::DoNotOptimize(RmsNorm(x, gamma, 1e-6f, y));
    if constexpr (kKind == 2) benchmark::DoNotOptimize(ScaleNorm(x, 27.7f, 1e-5f, y));
  }
  state.SetBytesProcessed(state.iterations() * rows * dim * 8);
}
BENCHMARK(BM_Norm<0>)->Name("BM_LayerNorm")->Args({512, 768});
BENCHMARK(BM_Norm<1>)->Name("BM_RmsNorm")->Args({512, 768});
BENCHMARK(BM_Norm<2>)->Name("BM_ScaleNorm")->Args({512, 768});

// A full attention layer (projections, kernel, W_O) at d=768, 12 heads: the GPT-2-small shape.
// Args: kind, causal, batch, time.
void BM_AttentionLayer(benchmark::State& state) {
  const auto kind = static_cast<AttentionKind>(state.range(0));
  const bool causal = state.range(1) != 0;
  const int64_t batch = state.range(2), time = state.range(3), d = 768, heads = 12, dh = 64;
  AttentionConfig config;
  config.kind = kind;
  config.model_dim = d;
  config.num_heads = heads;
  config.head_dim_qk = config.head_dim_v = dh;
  config.causal = causal;
  const float s = 1.0f / std::sqrt(static_cast<float>(d));
  auto layer = MultiHeadAttention::Create(
      config, {Random({d, d}, s), Random({d}, s), Random({d, d}, s), Random({d}, s),
               Random({d, d}, s), Random({d}, s), Random({d, d}, s), Random({d}, s)});
  if (!layer.ok()) return state.SkipWithError(std::string(layer.status().message()).c_str());
  const PaddedBatch x{Random({batch, time, d}), std::vector<int64_t>(batch, time)};
  for (auto _ : state) {
    auto y = layer->Forward(x);
    benchmark::DoNotOptimize(y);
  }
  // Projections 4·2·T·d², plus scores and values (halved when causal) or linear's 2 passes.
  const double projections = 8.0 * batch * time * d * d;
  const double attention = kind == AttentionKind::kLinear
                               ? 4.0 * batch * time * heads * dh * dh
                               : 4.0 * batch * time * time * d * (causal ? 0.5 : 1.0);
  SetGflops(state, projections + attention);
}
BENCHMARK(BM_AttentionLayer)
    ->ArgNames({"kind", "causal", "batch", "time"})
    ->Args({0, 1, 1, 512})  // causal MHA, the comparison point
    ->Args({0, 0, 1, 512})
    ->Args({0, 1, 8, 128})
    ->Args({1, 1, 1, 512})  // XSA
    ->Args({2, 1, 1, 512})  // causal linear
    ->Args({2, 0, 1, 512})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// Decoding's attention kernel: one query against a cache of `context` keys and values (12 heads
// of 64) that is not in cache, as in a step after the weights streamed through. Caches rotate
// through copies totalling far more than the last-level cache; reports the cache bytes read/s.
void BM_DecodeAttentionFromMemory(benchmark::State& state) {
  const int64_t context = state.range(0), heads = 12, dh = 64;
  const int64_t bytes = 2 * context * heads * dh * 4;
  const int64_t copies = std::max<int64_t>(2, (256ll << 20) / bytes);
  std::vector<Tensor> keys, values;
  for (int64_t c = 0; c < copies; ++c) {
    keys.push_back(Random({1, context, heads * dh}));
    values.push_back(Random({1, context, heads * dh}));
  }
  const Tensor q = Random({1, 1, heads * dh});
  Tensor out({1, 1, heads * dh});
  const std::vector<int64_t> q_lengths = {1}, k_lengths = {context};
  int64_t next = 0;
  for (auto _ : state) {
    ScaledDotProductAttention(q, q_lengths, keys[next], values[next], k_lengths, heads,
                              {0.125f, true, {}}, out);
    next = (next + 1) % copies;
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_DecodeAttentionFromMemory)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The softmax attention kernel alone (no projections). Args: causal, time.
void BM_ScaledDotProduct(benchmark::State& state) {
  const bool causal = state.range(0) != 0;
  const int64_t time = state.range(1), heads = 12, dh = 64;
  const Tensor q = Random({1, time, heads * dh}), k = Random({1, time, heads * dh});
  const Tensor v = Random({1, time, heads * dh});
  Tensor out({1, time, heads * dh});
  const std::vector<int64_t> lengths = {time};
  for (auto _ : state) {
    ScaledDotProductAttention(q, lengths, k, v, lengths, heads, {0.125f, causal, {}}, out);
  }
  SetGflops(state, 4.0 * time * time * heads * dh * (causal ? 0.5 : 1.0));
}
BENCHMARK(BM_ScaledDotProduct)
    ->ArgNames({"causal", "time"})
    ->Args({1, 512})
    ->Args({0, 512})
    ->Args({1, 2048})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_SimpleSelfAttention(benchmark::State& state) {
  const int64_t time = state.range(0), d = 256;
  const PaddedBatch x{Random({1, time, d}, 0.1f), {time}};
  for (auto _ : state) {
    auto y = SimpleSelfAttention(x, true, false);
    benchmark::DoNotOptimize(y);
  }
  SetGflops(state, 4.0 * time * time * d);
}
BENCHMARK(BM_SimpleSelfAttention)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PointerAttention(benchmark::State& state) {
  const int64_t queries = state.range(0), memory = state.range(1), d = 256, width = 128;
  auto layer = PointerAttention::Create(
      {Random({width, d}, 0.06f), Random({width, d}, 0.06f), Random({1, width}, 0.1f)});
  const PaddedBatch q{Random({1, queries, d}), {queries}}, m{Random({1, memory, d}), {memory}};
  for (auto _ : state) {
    auto y = layer->Forward(q, m);
    benchmark::DoNotOptimize(y);
  }
  state.SetItemsProcessed(state.iterations() * queries * memory);
}
BENCHMARK(BM_PointerAttention)->Args({64, 256})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace attnserve

BENCHMARK_MAIN();
