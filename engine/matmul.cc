#include "engine/matmul.h"

#include <map>
#include <memory>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/dnnl_context.h"
#include "engine/kernels/few_rows_linear.h"

namespace attnserve {
namespace {

using dnnl::memory;

struct MatmulKey {
  int64_t k, n, lda, ldw, ldc;
  bool has_bias;
  MatmulEpilogue epilogue;

  auto Tie() const {
    return std::tie(k, n, lda, ldw, ldc, has_bias, epilogue.accumulate, epilogue.activation);
  }
  bool operator<(const MatmulKey& other) const { return Tie() < other.Tie(); }
  std::string ToString() const {
    return absl::StrCat("k=", k, " n=", n, " lda=", lda, " ldw=", ldw, " ldc=", ldc,
                        " bias=", has_bias, " activation=", static_cast<int>(epilogue.activation),
                        " accumulate=", epilogue.accumulate);
  }
};

struct CachedMatmul {
  dnnl::matmul primitive;
  std::string implementation;
};

dnnl::algorithm EltwiseAlgorithm(Activation activation) {
  switch (activation) {
    case Activation::kRelu:
      return dnnl::algorithm::eltwise_relu;
    case Activation::kGeluErf:
      return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::kGeluTanh:
      return dnnl::algorithm::eltwise_gelu_tanh;
    case Activation::kNone:
      break;
  }
  return dnnl::algorithm::undef;
}

CachedMatmul CreateMatmul(const MatmulKey& key) {
  const memory::dim runtime = DNNL_RUNTIME_DIM_VAL;
  memory::desc src({runtime, key.k}, memory::data_type::f32, {key.lda, 1});
  // Wᵀ viewed in place: element (k, n) of the [K, N] operand lives at n * ldw + k.
  memory::desc weights({key.k, key.n}, memory::data_type::f32, {1, key.ldw});
  memory::desc dst({runtime, key.n}, memory::data_type::f32, {key.ldc, 1});
  memory::desc bias =
      key.has_bias ? memory::desc({1, key.n}, memory::data_type::f32, {key.n, 1}) : memory::desc();

  dnnl::post_ops post_ops;
  if (key.epilogue.activation != Activation::kNone) {
    post_ops.append_eltwise(1.0f, EltwiseAlgorithm(key.epilogue.activation), 0.0f, 0.0f);
  }
  if (key.epilogue.accumulate) post_ops.append_sum(1.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(post_ops);

  dnnl::matmul::desc desc = key.has_bias ? dnnl::matmul::desc(src, weights, bias, dst)
                                         : dnnl::matmul::desc(src, weights, dst);
  dnnl::matmul::primitive_desc primitive_desc(desc, attr, DnnlEngine());
  return {dnnl::matmul(primitive_desc), primitive_desc.impl_info_str()};
}

class MatmulCache {
 public:
  static MatmulCache& Get() {
    static auto* cache = new MatmulCache();
    return *cache;
  }

  const CachedMatmul& Lookup(const MatmulKey& key) {
    {
      absl::ReaderMutexLock lock(&mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end()) return *it->second;
    }
    // Creation takes milliseconds; do it outside the lock, keep the first one inserted.
    auto created = std::make_unique<CachedMatmul>(CreateMatmul(key));
    absl::MutexLock lock(&mutex_);
    auto [it, inserted] = entries_.try_emplace(key, std::move(created));
    return *it->second;
  }

  std::vector<PrimitiveInfo> List() {
    absl::ReaderMutexLock lock(&mutex_);
    std::vector<PrimitiveInfo> list;
    for (const auto& [key, entry] : entries_)
      list.push_back({key.ToString(), entry->implementation});
    return list;
  }

 private:
  absl::Mutex mutex_;
  std::map<MatmulKey, std::unique_ptr<CachedMatmul>> entries_ ABSL_GUARDED_BY(mutex_);
};

bool RowsAreDense(const Tensor& t) { return t.rank() == 2 && t.stride(1) == 1; }

}  // namespace

absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y,
                    MatmulEpilogue epilogue) {
  if (!RowsAreDense(x) || !RowsAreDense(weight) || !RowsAreDense(y)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: operands must be 2-D with unit inner stride; x ", x.ShapeString(),
                     ", weight ", weight.ShapeString(), ", y ", y.ShapeString()));
  }
  const int64_t m = x.dim(0), k = x.dim(1), n = weight.dim(0);
  if (weight.dim(1) != k || y.dim(0) != m || y.dim(1) != n ||
      (!bias.empty() && (bias.size() != n || !bias.is_contiguous()))) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: shapes disagree: x ", x.ShapeString(),
                                                   ", weight ", weight.ShapeString(), ", bias ",
                                                   bias.ShapeString(), ", y ", y.ShapeString()));
  }
  if (m == 0) return absl::OkStatus();
  if (m <= kFewRowsMax) {
    FewRowsLinear(x, weight, bias, y, epilogue);
    return absl::OkStatus();
  }

  MatmulKey key{k, n, x.stride(0), weight.stride(0), y.stride(0), !bias.empty(), epilogue};
  const CachedMatmul& matmul = MatmulCache::Get().Lookup(key);

  dnnl::engine& engine = DnnlEngine();
  memory src(memory::desc({m, k}, memory::data_type::f32, {key.lda, 1}), engine,
             const_cast<float*>(x.data()));
  memory weights(memory::desc({k, n}, memory::data_type::f32, {1, key.ldw}), engine,
                 const_cast<float*>(weight.data()));
  memory dst(memory::desc({m, n}, memory::data_type::f32, {key.ldc, 1}), engine, y.data());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  if (!bias.empty()) {
    args.emplace(DNNL_ARG_BIAS, memory(memory::desc({1, n}, memory::data_type::f32, {n, 1}), engine,
                                       const_cast<float*>(bias.data())));
  }
  matmul.primitive.execute(DnnlStream(), args);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> LinearRows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  MatmulEpilogue epilogue) {
  Shape shape = x.shape();
  shape.back() = weight.dim(0);
  Tensor y(shape);
  Tensor y_rows = y.FlattenRows();
  if (auto status = Linear(x.FlattenRows(), weight, bias, y_rows, epilogue); !status.ok()) {
    return status;
  }
  return y;
}

std::vector<PrimitiveInfo> CreatedMatmulPrimitives() { return MatmulCache::Get().List(); }

}  // namespace attnserve
