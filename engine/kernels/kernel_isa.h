// Which vector instruction set the hand-written kernels use, chosen at run time: the build
// targets AVX2 + FMA (every machine we serve on has them); kernels with an AVX-512 path take it
// where the CPU has AVX-512, and int8 weights are multiplied by int8 activations where it also
// has VNNI (engine/kernels/int8_panel_products.h).
#pragma once

namespace attnserve {

// Ordered: each includes what the ones before it have.
enum class KernelIsa { kAvx2, kAvx512, kAvx512Vnni };

// The widest this CPU runs, capped by ATTNSERVE_MAX_ISA=avx2 or =avx512 in the environment (for
// tests and comparisons of the paths on one machine).
KernelIsa BestKernelIsa();
const char* KernelIsaName(KernelIsa isa);

}  // namespace attnserve
