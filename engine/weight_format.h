// How a model keeps its linear layers' weights: a load option, not part of the model file.
#pragma once

#include <cstdint>

namespace attnserve {

// float32 (packed where that is faster), or int8 with a scale per group of group_size input
// columns of each output column (0: one scale per output column), quantized at load
// (docs/model-format.md, "Quantized weights"). Groups of 32 by default: all-MiniLM-L6-v2's
// embeddings keep a cosine of 0.9996 to float32's with them, 0.998 with a scale per column
// (docs/benchmarks.md), for 1/8 more bytes than int8 values alone.
struct WeightFormat {
  bool int8 = false;
  int64_t group_size = 32;
  // Where the CPU has VNNI, int8 weights multiply up to kFewRowsMaxInt8Activations rows (decoding,
  // short prompts) by activations quantized to int8 per block of 32, as llama.cpp does: SmolLM2's
  // decoding steps 1.1-1.5x, 16 streams' 1.4x as fast; MiniLM's least embedding cosine to float32
  // 0.9985 instead of 0.9995 (docs/benchmarks.md, "Int8 activations"). false keeps them float.
  bool int8_activations = true;
  // "auto": LoadModel chooses int8 for a GGUF file whose layers are block-quantized (the closest
  // the engine keeps to the file's precision and size), float32 for anything else; the loaded
  // model's config says which.
  bool automatic = false;
};

}  // namespace attnserve
