// How a model keeps its linear layers' weights: a load option, not part of the model file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace attnserve {

class WeightGrids;  // engine/weight_grid.h

// float32 (packed where that is faster), or quantized at load (docs/model-format.md, "Quantized
// weights") to
//   int8: symmetric, a float scale per group of group_size input columns of each output column
//         (0: one per output column). Groups of 32 by default: all-MiniLM-L6-v2's embeddings keep
//         a cosine of 0.9996 to float32's with them, 0.998 with a scale per column
//         (docs/benchmarks.md), for 1/8 more bytes than int8 values alone.
//   int4: levels 0-15 with an f16 scale and an f16 minimum per 32 input columns (llama.cpp's
//         Q4_1), 5 bits a weight; a layer whose depth is not a multiple of 32 stays int8.
struct WeightFormat {
  bool quantized = false;
  // Not quantized: bfloat16, every value rounded to it at load (engine/bf16_weight.h), multiplied
  // through AMX with x rounded to bfloat16 and products summed in float32; without AMX the rounded
  // weights are multiplied in float32. Embeddings and reranking 1.6-2.7x float32's speed,
  // all-MiniLM-L6-v2's embeddings within a cosine of 0.99997 of float32's (docs/benchmarks.md,
  // "Retrieval").
  bool bf16 = false;
  int bits = 8;  // 8 or 4, when quantized
  int64_t group_size = 32;
  // Where the CPU has VNNI, int8 weights multiply up to kFewRowsMaxInt8Activations rows (decoding,
  // short prompts) by activations quantized to int8 per block of 32, as llama.cpp does: SmolLM2's
  // decoding steps 1.1-1.5x, 16 streams' 1.4x as fast; MiniLM's least embedding cosine to float32
  // 0.9985 instead of 0.9995 (docs/benchmarks.md, "Int8 activations"). false keeps them float.
  // Int4 weights always take int8 activations there (on AVX2 too): it is what their kernels do.
  bool int8_activations = true;
  // With int4: whether the token table and the LM head take 4 bits too. They stay int8 by default,
  // as llama.cpp's quantizer keeps them at 6-8 bits: SmolLM2's perplexity on held-out text rises
  // 0.8% with int4 layers, 6% with its (tied) table in int4 as well (docs/benchmarks.md, "Int4").
  bool int4_lm_head = false;
  // "auto": LoadModel chooses, for a GGUF file whose layers are block-quantized, int4 where most
  // of them have 4 bits, int8 otherwise (the closest the engine keeps to the file's precision and
  // size), float32 for anything else; the loaded model's config says which.
  bool automatic = false;
  // While a block-quantized file loads under "auto": the grids its matrices are stored on, so
  // that each is kept as the file holds it where a layout can (QuantizedWeight::OnGrid), and what
  // was not. Null otherwise, and never part of a loaded model's config.
  std::shared_ptr<WeightGrids> grids = nullptr;
};

// The format of the token table and the LM head.
inline WeightFormat LmHeadFormat(WeightFormat format) {
  if (format.bits == 4 && !format.int4_lm_head) format.bits = 8;
  return format;
}

// "float32", "bf16", "int8" or "int4".
inline const char* WeightFormatName(const WeightFormat& format) {
  if (!format.quantized) return format.bf16 ? "bf16" : "float32";
  return format.bits == 4 ? "int4" : "int8";
}

// The format named "float32", "bf16", "int8", "int4" or "auto" (the other fields kept), or
// nothing.
inline std::optional<WeightFormat> WeightFormatNamed(std::string_view name, WeightFormat format) {
  if (name != "float32" && name != "bf16" && name != "int8" && name != "int4" && name != "auto") {
    return std::nullopt;
  }
  format.quantized = name == "int8" || name == "int4";
  format.bf16 = name == "bf16";
  format.bits = name == "int4" ? 4 : 8;
  format.automatic = name == "auto";
  return format;
}

}  // namespace attnserve
