// Which vector instruction set the hand-written kernels use, chosen at run time: the build
// targets AVX2 + FMA (every machine we serve on has them); kernels with an AVX-512 path take it
// where the CPU has AVX-512.
#pragma once

namespace attnserve {

enum class KernelIsa { kAvx2, kAvx512 };

// The widest this CPU runs, capped by ATTNSERVE_MAX_ISA=avx2 in the environment (for tests and
// comparisons of both paths on one machine).
KernelIsa BestKernelIsa();
const char* KernelIsaName(KernelIsa isa);

}  // namespace attnserve
