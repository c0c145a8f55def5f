// A GGUF file (llama.cpp's model format, versions 2 and 3): a header, typed metadata (hyper-
// parameters, the tokenizer's vocabulary and merges, the chat template) and tensors in ggml's
// types, float or block-quantized. Open() reads and validates the header, every metadata value
// and every tensor's extent before anything is used, so a malformed or hostile file (bad magic,
// counts or offsets past the file, overflowing sizes, unknown types, misaligned data, huge
// arrays) is refused with a message naming the file and the key or tensor.
//
// Read, not mapped: tensor bytes are read (pread) when a tensor is asked for and dequantized into
// float32 memory of its own, so that loading holds one tensor's source bytes at a time and the
// file may change or go away once the model is loaded (a mapping would SIGBUS on truncation).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tensor.h"
#include "engine/weight_grid.h"

namespace attnserve {

// ggml's tensor types that attnserve reads (ggml.h's enum ggml_type values).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// "F32", "Q4_K", ...; for a value outside the enum, "type N".
std::string GgmlTypeName(GgmlType type);
// Whether the type is block-quantized (not F32, F16 or BF16).
bool IsQuantized(GgmlType type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml's ne: the fastest-varying (a row's length) first
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // from the start of the file
  uint64_t bytes = 0;
  // The shape in row-major order (dims reversed): a [out, in] weight has dims {in, out}.
  Shape shape() const;
};

class GgufFile {
 public:
  // Limits beyond which a file is refused as hostile rather than read.
  static constexpr uint64_t kMaxArrayElements = uint64_t{1} << 22;  // a vocabulary, merges
  static constexpr uint64_t kMaxStringBytes = uint64_t{1} << 24;    // a chat template
  static constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 30;  // all metadata, as read
  static constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
  static constexpr int kMaxDims = 4;

  static absl::StatusOr<GgufFile> Open(const std::string& path);
  // The same over bytes in memory (tests, the fuzzer); `name` stands for the path in errors.
  static absl::StatusOr<GgufFile> FromBytes(std::string name, std::string bytes);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }

  // Every metadata value by key, as JSON: integers (any width), floats, booleans, strings and
  // arrays of them. A key absent from the file is absent here.
  const nlohmann::json& metadata() const { return metadata_; }

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* Find(const std::string& name) const;

  // The tensor dequantized to float32, in shape() order; errors name the file and the tensor
  // (and FAILED_PRECONDITION when the file changed since Open).
  absl::StatusOr<Tensor> Float32(const GgufTensorInfo& tensor) const;
  // Rows [first, first + count) of a 2-D tensor ([count, row length]), read and dequantized
  // without the rest: a large table is quantized in slices, never whole in float32.
  absl::StatusOr<Tensor> Float32Rows(const GgufTensorInfo& tensor, int64_t first,
                                     int64_t count) const;
  // The grid a 2-D tensor of a type GgmlGrid describes is stored on (its groups' scales and
  // minimums, [rows, groups] each); errors name the file and the tensor.
  absl::StatusOr<WeightGrid> Grid(const GgufTensorInfo& tensor) const;

 private:
  struct Source;  // the open file, or bytes in memory
  // Open's and FromBytes' parse of the header, metadata and tensor infos.
  static absl::StatusOr<GgufFile> Parse(std::shared_ptr<const Source> source);
  // The info's extent checked against the file again (it may not be this file's own), so that
  // nothing is read out of bounds whatever it says.
  absl::Status CheckExtent(const GgufTensorInfo& tensor) const;

  std::string path_;
  uint32_t version_ = 0;
  nlohmann::json metadata_ = nlohmann::json::object();
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;  // tensors_' positions by name
  std::shared_ptr<const Source> source_;
};

}  // namespace attnserve
