// A safetensors file read into memory the process owns: an 8-byte little-endian header length, a
// JSON header ({name: {dtype, shape, data_offsets}, "__metadata__": {string: string}}), then the
// data. Open() reads and validates the header, so a malformed file is refused with a message
// naming the file and the tensor, and accessors never read out of bounds.
//
// Owned, not mapped: a mapping of the file would let whoever truncates or rewrites it change the
// weights under the server (SIGBUS on the next read past the new end, other numbers in place).
// Each tensor is read into its place in an anonymous mapping of the file's size when first asked
// for (the file stays open while this object lasts), and each view holds a lease on its bytes:
// once no view of a tensor is left (its weight was packed, quantized or fused into another
// buffer), the whole pages inside it go back to the system. So loading holds at most the file's
// tensors still in use, not the whole file: int8 weights load tensor by tensor. A file that
// changes on disk between Open and a read is refused (FAILED_PRECONDITION).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tensor.h"

namespace attnserve {

// A file's bytes in memory, with the handle that keeps them there.
struct FileBytes {
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> owner;
};

class SafetensorsFile {
 public:
  // Headers larger than this are refused as malformed rather than parsed.
  static constexpr uint64_t kMaxHeaderBytes = 100 << 20;

  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }

  // A view of the file's bytes (a copy if the data is not 4-byte aligned) for F32; F16 and BF16
  // widened to float32 in memory of their own.
  absl::StatusOr<Tensor> Float32(const std::string& name) const;
  // I64 or I32 tensors, widened.
  absl::StatusOr<std::vector<int64_t>> Integers(const std::string& name) const;

  // The whole file; pages of tensors never read, or nobody holds, read as zeros.
  FileBytes bytes() const;

 private:
  struct Entry {
    std::string dtype;
    Shape shape;
    uint64_t begin = 0, end = 0;  // offsets into the data section
  };
  struct Contents;
  struct Source;
  struct Lease;

  absl::StatusOr<const Entry*> Find(const std::string& name) const;
  // Reads bytes [begin, end) of the file into their place in contents_; an error says
  // "PATH: " `what` "changed on disk ..." (or the read's failure).
  absl::Status ReadRange(uint64_t begin, uint64_t end, const std::string& what = "") const;
  // Tensor `name`'s data (its entry), read from the file.
  absl::StatusOr<const uint8_t*> Read(const std::string& name, const Entry& entry) const;

  std::string path_;
  std::shared_ptr<Source> source_;
  std::shared_ptr<const Contents> contents_;
  uint64_t data_offset_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
  mutable std::map<std::string, std::weak_ptr<const Lease>> leases_;
};

}  // namespace attnserve
