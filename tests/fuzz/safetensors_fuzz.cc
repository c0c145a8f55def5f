// libFuzzer target: arbitrary bytes as a model.safetensors. Open() must refuse or accept without
// crashing, and every tensor of an accepted file must be readable in bounds.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("safetensors_fuzz", 0);
  if (fd < 0) return 0;
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  auto file = attnserve::SafetensorsFile::Open("/proc/self/fd/" + std::to_string(fd));
  if (file.ok()) {
    float sink = 0.0f;
    for (const std::string& name : file->names()) {
      if (auto tensor = file->Float32(name); tensor.ok()) {
        for (int64_t i = 0; i < tensor->size(); ++i) sink += tensor->data()[i];
      }
      if (auto ints = file->Integers(name); ints.ok()) sink += static_cast<float>(ints->size());
    }
    volatile float keep = sink;
    (void)keep;
  }
  close(fd);
  return 0;
}
