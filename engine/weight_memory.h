// Memory for weights the engine copies at load (packed or quantized): 64-byte aligned, and blocks
// of 2 MB or more in mappings of their own that start on a 2 MB boundary with transparent huge
// pages requested. Decoding streams every weight for every token, and with 4 KB pages that is a
// TLB miss every 4 KB.
#pragma once

#include <cstddef>
#include <memory>

namespace attnserve {

std::shared_ptr<void> AllocateWeightMemory(size_t bytes);

template <typename T>
std::shared_ptr<T> AllocateWeights(size_t count) {
  return std::static_pointer_cast<T>(AllocateWeightMemory(count * sizeof(T)));
}

}  // namespace attnserve
