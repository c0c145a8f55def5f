// The process-wide oneDNN CPU engine and a per-thread stream.
#pragma once

#include <dnnl.hpp>
#include <string>

namespace attnserve {

dnnl::engine& DnnlEngine();
// Each thread gets its own stream so concurrent callers never share one.
dnnl::stream& DnnlStream();
// Whether oneDNN, left to choose the weights' layout of a fixed-shape matmul with operands of
// `type` (float output), picks `packed` on a brgemm kernel: that packing is what runs fastest on
// this CPU. False where oneDNN has no kernel for `type`.
bool MatmulPicksPackedBrgemm(dnnl::memory::data_type type, dnnl::memory::format_tag packed);
// oneDNN's name for the kernel it picks for that matmul ("brg:avx512_core_amx", ...), empty where
// it has none.
std::string MatmulImplementation(dnnl::memory::data_type type);

}  // namespace attnserve
