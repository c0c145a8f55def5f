#include "engine/kernels/kernel_isa.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace attnserve {
namespace {

KernelIsa DetectKernelIsa() {
  __builtin_cpu_init();
  KernelIsa isa = KernelIsa::kAvx2;
  if (__builtin_cpu_supports("avx512f")) isa = KernelIsa::kAvx512;
  if (isa == KernelIsa::kAvx512 && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vnni")) {
    isa = KernelIsa::kAvx512Vnni;
  }
  const char* cap = std::getenv("ATTNSERVE_MAX_ISA");
  if (cap != nullptr && std::string(cap) == "avx2") return KernelIsa::kAvx2;
  if (cap != nullptr && std::string(cap) == "avx512") return std::min(isa, KernelIsa::kAvx512);
  return isa;
}

}  // namespace

KernelIsa BestKernelIsa() {
  static const KernelIsa isa = DetectKernelIsa();
  return isa;
}

const char* KernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx2:
      return "avx2";
    case KernelIsa::kAvx512:
      return "avx512";
    case KernelIsa::kAvx512Vnni:
      return "avx512_vnni";
  }
  return "?";
}

}  // namespace attnserve
