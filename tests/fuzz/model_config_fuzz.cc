// libFuzzer target: arbitrary bytes as a config.json. ParseModelConfig must refuse or accept
// without crashing; an accepted config must satisfy the invariants the loader relies on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/importers/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = attnserve::ParseModelConfig(text, "config.json");
  if (config.ok()) {
    const bool consistent = config->model_dim > 0 && config->num_heads > 0 &&
                            config->head_dim_qk > 0 && config->head_dim_v > 0 &&
                            config->max_positions > 0 &&
                            (config->vocab_size > 0) != (config->input_dim > 0);
    if (!consistent) std::abort();
  }
  return 0;
}
