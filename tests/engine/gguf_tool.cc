// GGUF files through engine/gguf for tests/engine/gguf_dequantize_test.py:
//   gguf_tool info FILE                      the version, metadata and tensor infos as JSON
//   gguf_tool dequantize FILE TENSOR OUT     the tensor as float32 (raw, native order) in OUT
// A file or tensor that does not read: its error on stderr, exit code 2.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/gguf/gguf_file.h"

namespace {

int Fail(const absl::Status& status) {
  std::cerr << status << "\n";
  return 2;
}

int Info(const attnserve::GgufFile& file) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const attnserve::GgufTensorInfo& tensor : file.tensors()) {
    tensors.push_back({{"name", tensor.name},
                       {"type", static_cast<uint32_t>(tensor.type)},
                       {"type_name", attnserve::GgmlTypeName(tensor.type)},
                       {"dims", tensor.dims},
                       {"shape", tensor.shape()},
                       {"offset", tensor.offset},
                       {"bytes", tensor.bytes}});
  }
  const nlohmann::json info = {
      {"version", file.version()}, {"metadata", file.metadata()}, {"tensors", tensors}};
  // Strings that are not UTF-8 come out with U+FFFD in place of their bad bytes.
  std::cout << info.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

int Dequantize(const attnserve::GgufFile& file, const std::string& name, const std::string& out) {
  const attnserve::GgufTensorInfo* info = file.Find(name);
  if (info == nullptr) return Fail(absl::NotFoundError(file.path() + ": no tensor " + name));
  auto tensor = file.Float32(*info);
  if (!tensor.ok()) return Fail(tensor.status());
  std::ofstream stream(out, std::ios::binary);
  stream.write(reinterpret_cast<const char*>(tensor->data()),
               static_cast<std::streamsize>(tensor->size() * sizeof(float)));
  if (!stream.flush()) return Fail(absl::InternalError("cannot write " + out));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (!((command == "info" && argc == 3) || (command == "dequantize" && argc == 5))) {
    std::cerr << "usage: gguf_tool info FILE | gguf_tool dequantize FILE TENSOR OUT.f32\n";
    return 1;
  }
  auto file = attnserve::GgufFile::Open(argv[2]);
  if (!file.ok()) return Fail(file.status());
  return command == "info" ? Info(*file) : Dequantize(*file, argv[3], argv[4]);
}
