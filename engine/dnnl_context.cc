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

namespace {

constexpr dnnl::memory::dim kProbeM = 64, kProbeK = 256, kProbeN = 256;

// A matmul of the probe's shape with operands of `type` and the weights' layout left to oneDNN.
dnnl::matmul::primitive_desc ProbeMatmul(dnnl::memory::data_type type) {
  using dnnl::memory;
  const memory::desc src({kProbeM, kProbeK}, type, memory::format_tag::ab);
  const memory::desc any({kProbeK, kProbeN}, type, memory::format_tag::any);
  const memory::desc dst({kProbeM, kProbeN}, memory::data_type::f32, memory::format_tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, any, dst), DnnlEngine());
}

}  // namespace

bool MatmulPicksPackedBrgemm(dnnl::memory::data_type type, dnnl::memory::format_tag packed) {
  try {
    const dnnl::matmul::primitive_desc desc = ProbeMatmul(type);
    return desc.weights_desc() == dnnl::memory::desc({kProbeK, kProbeN}, type, packed) &&
           std::string(desc.impl_info_str()).find("brg") != std::string::npos;
  } catch (const dnnl::error&) {
    return false;
  }
}

std::string MatmulImplementation(dnnl::memory::data_type type) {
  try {
    return ProbeMatmul(type).impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  }
}

}  // namespace attnserve
