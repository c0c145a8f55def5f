// libFuzzer target: arbitrary bytes as a GGUF file. FromBytes must refuse or accept without
// crashing, and every tensor of an accepted file must dequantize in bounds.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/gguf/gguf_file.h"
#include "engine/quantized_weight.h"

namespace {

// Tensors lie within the input, so their size is bounded by it (at most ~3 elements a byte, for
// Q2_K); this bound keeps a large corpus file quick all the same.
constexpr int64_t kMaxElements = int64_t{1} << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = attnserve::GgufFile::FromBytes(
      "fuzz.gguf", std::string(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) return 0;
  // Metadata strings need not be UTF-8: dumped with replacement characters, never a throw.
  size_t sink =
      file->metadata().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
  float sum = 0.0f;
  for (const attnserve::GgufTensorInfo& info : file->tensors()) {
    int64_t elements = 1;
    for (int64_t dim : info.dims) elements *= dim;  // Open checked that this does not overflow
    if (elements > kMaxElements) continue;
    if (auto tensor = file->Float32(info); tensor.ok()) {
      for (int64_t i = 0; i < tensor->size(); ++i) sum += tensor->data()[i];
      sink += static_cast<size_t>(tensor->size());
      // The grid --weights=auto keeps it on, where its type has one: the values must lie on it.
      if (auto grid = file->Grid(info); grid.ok()) {
        auto kept = attnserve::QuantizedWeight::OnGrid(*tensor, *grid, true);
        sink += kept.ok() ? static_cast<size_t>(kept->bytes()) : 0;
      }
    }
  }
  volatile float keep_sum = sum;
  volatile size_t keep_sink = sink;
  (void)keep_sum;
  (void)keep_sink;
  return 0;
}
