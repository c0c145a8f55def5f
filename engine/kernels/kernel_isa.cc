#include "engine/kernels/kernel_isa.h"

#include <cstdlib>
#include <string>

namespace attnserve {
namespace {

KernelIsa DetectKernelIsa() {
  const char* cap = std::getenv("ATTNSERVE_MAX_ISA");
  if (cap != nullptr && std::string(cap) == "avx2") return KernelIsa::kAvx2;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") ? KernelIsa::kAvx512 : KernelIsa::kAvx2;
}

}  // namespace

KernelIsa BestKernelIsa() {
  static const KernelIsa isa = DetectKernelIsa();
  return isa;
}

const char* KernelIsaName(KernelIsa isa) { return isa == KernelIsa::kAvx512 ? "avx512" : "avx2"; }

}  // namespace attnserve
