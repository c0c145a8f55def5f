#include "engine/dnnl_context.h"

#include <string>

namespace attnserve {

dnnl::engine& DnnlEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& DnnlStream() {
  thread_local dnnl::stream stream(DnnlEngine());
  return stream;
}

bool MatmulPicksPackedBrgemm(dnnl::memory::data_type type, dnnl::memory::format_tag packed) {
  using dnnl::memory;
  const memory::dim m = 64, k = 256, n = 256;
  const memory::desc src({m, k}, type, memory::format_tag::ab);
  const memory::desc any({k, n}, type, memory::format_tag::any);
  const memory::desc dst({m, n}, memory::data_type::f32, memory::format_tag::ab);
  try {
    const dnnl::matmul::primitive_desc desc(dnnl::matmul::desc(src, any, dst), DnnlEngine());
    return desc.weights_desc() == memory::desc({k, n}, type, packed) &&
           std::string(desc.impl_info_str()).find("brg") != std::string::npos;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace attnserve
