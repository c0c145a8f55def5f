#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/bf16.h"

namespace attnserve {

// The file's bytes in an anonymous private mapping, read-only but while a tensor is read into
// it: pages can be handed back one range at a time, and pages never read cost nothing.
struct SafetensorsFile::Contents {
  uint8_t* data = nullptr;
  size_t size = 0;
  ~Contents() {
    if (data != nullptr) munmap(data, size);
  }
};

// The open file, while the SafetensorsFile lasts: tensors are read from it when first asked for.
struct SafetensorsFile::Source {
  int fd = -1;
  struct stat opened {};  // the file as Open found it
  std::mutex mutex;       // one read at a time: they change page protections
  ~Source() {
    if (fd >= 0) ::close(fd);
  }
};

// Keeps one tensor's bytes; the last view of the tensor going away releases the whole pages
// inside them (MADV_DONTNEED: they read as zeros and cost nothing until written).
struct SafetensorsFile::Lease {
  Lease(std::shared_ptr<const Contents> contents, const uint8_t* begin, const uint8_t* end)
      : contents(std::move(contents)), begin(begin), end(end) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
    const uintptr_t last = reinterpret_cast<uintptr_t>(end) / page * page;
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }
  const std::shared_ptr<const Contents> contents;
  const uint8_t *const begin, *const end;
};

namespace {

int64_t DtypeBytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2},  {"U32", 4}, {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

}  // namespace

absl::Status SafetensorsFile::ReadRange(uint64_t begin, uint64_t end,
                                        const std::string& what) const {
  if (end <= begin) return absl::OkStatus();
  std::lock_guard lock(source_->mutex);
  struct stat now;
  if (fstat(source_->fd, &now) != 0 || now.st_size != source_->opened.st_size ||
      now.st_mtim.tv_sec != source_->opened.st_mtim.tv_sec ||
      now.st_mtim.tv_nsec != source_->opened.st_mtim.tv_nsec) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": ", what, "changed on disk while it was being loaded"));
  }
  // Writable only while read into: a stray write anywhere else faults instead of changing
  // weights.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uint8_t* first = contents_->data + begin;
  auto* page_begin = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(first) / page * page);
  const size_t span = static_cast<size_t>(contents_->data + end - page_begin);
  mprotect(page_begin, span, PROT_READ | PROT_WRITE);
  absl::Status status;
  for (uint64_t done = begin; done < end;) {
    const ssize_t n = pread(source_->fd, contents_->data + done, end - done, done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      status = absl::FailedPreconditionError(
          absl::StrCat(path_, ": ", what,
                       n < 0 ? absl::StrCat("read failed: ", std::strerror(errno))
                             : absl::StrCat("shrank to ", done, " bytes while being read")));
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  mprotect(page_begin, span, PROT_READ);
  return status;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  auto fail = [&path](const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
  };
  auto source = std::make_shared<Source>();
  source->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source->fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  if (fstat(source->fd, &source->opened) != 0 || !S_ISREG(source->opened.st_mode)) {
    return fail("not a regular file");
  }
  auto contents = std::make_shared<Contents>();
  contents->size = static_cast<size_t>(source->opened.st_size);
  if (contents->size > 0) {
    void* data = mmap(nullptr, contents->size, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED) {
      return fail(
          absl::StrCat("cannot allocate ", contents->size, " bytes: ", std::strerror(errno)));
    }
    contents->data = static_cast<uint8_t*>(data);
  }
  SafetensorsFile file;
  file.path_ = path;
  file.source_ = std::move(source);
  file.contents_ = contents;

  if (contents->size < 8) return fail("truncated: shorter than the 8-byte header length");
  RETURN_IF_ERROR(file.ReadRange(0, 8));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | contents->data[i];
  if (header_bytes > kMaxHeaderBytes) {
    return fail(
        absl::StrCat("header length ", header_bytes, " exceeds the limit of ", kMaxHeaderBytes));
  }
  if (header_bytes > contents->size - 8) {
    return fail(absl::StrCat("truncated: header of ", header_bytes, " bytes but only ",
                             contents->size - 8, " follow"));
  }
  RETURN_IF_ERROR(file.ReadRange(8, 8 + header_bytes));

  file.data_offset_ = 8 + header_bytes;
  const uint64_t data_bytes = contents->size - file.data_offset_;
  nlohmann::json header =
      nlohmann::json::parse(contents->data + 8, contents->data + 8 + header_bytes, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return fail("header is not a JSON object");
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const nlohmann::json& value = item.value();
    if (name == "__metadata__") {
      if (!value.is_object()) return fail("__metadata__ is not an object");
      for (auto& [key, text] : value.items()) {
        if (!text.is_string()) return fail(absl::StrCat("__metadata__.", key, " is not a string"));
        file.metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      return fail(absl::StrCat("tensor '", name, "': ", what));
    };
    if (!value.is_object()) return bad("entry is not an object");
    Entry entry;
    auto dtype = value.find("dtype");
    auto shape = value.find("shape");
    auto offsets = value.find("data_offsets");
    if (dtype == value.end() || !dtype->is_string()) return bad("missing or non-string dtype");
    entry.dtype = dtype->get<std::string>();
    const int64_t element_bytes = DtypeBytes(entry.dtype);
    if (element_bytes == 0) return bad(absl::StrCat("unknown dtype ", entry.dtype));
    if (shape == value.end() || !shape->is_array()) return bad("missing shape");
    uint64_t elements = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) return bad("shape holds a non-negative integer per axis");
      const uint64_t extent = d.get<uint64_t>();
      if (extent > (uint64_t{1} << 40) || (extent > 0 && elements > (uint64_t{1} << 40) / extent)) {
        return bad("shape is too large");
      }
      elements *= extent;
      entry.shape.push_back(static_cast<int64_t>(extent));
    }
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return bad("data_offsets must be [begin, end]");
    }
    entry.begin = (*offsets)[0].get<uint64_t>();
    entry.end = (*offsets)[1].get<uint64_t>();
    if (entry.begin > entry.end || entry.end > data_bytes) {
      return bad(absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] fall outside the ",
                              data_bytes, "-byte data section"));
    }
    if (entry.end - entry.begin != elements * static_cast<uint64_t>(element_bytes)) {
      return bad(absl::StrCat("holds ", entry.end - entry.begin, " bytes but its shape ",
                              ShapeToString(entry.shape), " of ", entry.dtype, " needs ",
                              elements * element_bytes));
    }
    ranges.emplace_back(entry.begin, entry.end);
    file.entries_.emplace(name, std::move(entry));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return fail(absl::StrCat("tensors overlap at data offset ", ranges[i].first));
    }
  }
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

absl::StatusOr<const SafetensorsFile::Entry*> SafetensorsFile::Find(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  return &it->second;
}

absl::StatusOr<const uint8_t*> SafetensorsFile::Read(const std::string& name,
                                                     const Entry& entry) const {
  RETURN_IF_ERROR(ReadRange(data_offset_ + entry.begin, data_offset_ + entry.end,
                            absl::StrCat("tensor '", name, "': ")));
  return contents_->data + data_offset_ + entry.begin;
}

namespace {

// IEEE 754 binary16 to binary32, exactly (every half is a float).
float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1F, mantissa = half & 0x3FF;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000 | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // zero
  } else {
    // A subnormal half is a normal float: shift the mantissa up to its leading one.
    int shift = 0;
    uint32_t m = mantissa;
    while ((m & 0x400) == 0) {
      m <<= 1;
      ++shift;
    }
    bits = sign | static_cast<uint32_t>(113 - shift) << 23 | ((m & 0x3FF) << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

absl::StatusOr<Tensor> SafetensorsFile::Float32(const std::string& name) const {
  ASSIGN_OR_RETURN(const Entry* entry, Find(name));
  const std::string& dtype = entry->dtype;
  if (dtype != "F32" && dtype != "F16" && dtype != "BF16") {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", name, "' is ", dtype, ", expected F32, F16 or BF16"));
  }
  // A tensor some view still holds is in memory already; else it is read (again) from the file.
  std::shared_ptr<const Lease> lease = leases_[name].lock();
  if (lease != nullptr) {
    auto* data = reinterpret_cast<float*>(const_cast<uint8_t*>(lease->begin));
    return Tensor::Wrap(data, entry->shape, std::move(lease));
  }
  ASSIGN_OR_RETURN(const uint8_t* data, Read(name, *entry));
  const uint64_t bytes = entry->end - entry->begin;
  // Held by the view returned, or released as this returns when the bytes were copied.
  lease = std::make_shared<const Lease>(contents_, data, data + bytes);
  if (dtype == "F16" || dtype == "BF16") {
    // Widened into memory of its own: the engine computes in float32.
    Tensor wide(entry->shape);
    for (uint64_t i = 0; i < bytes / 2; ++i) {
      uint16_t value;
      std::memcpy(&value, data + 2 * i, sizeof(value));
      wide.data()[i] = dtype == "F16" ? HalfToFloat(value) : FromBf16(value);
    }
    return wide;
  }
  if (reinterpret_cast<uintptr_t>(data) % alignof(float) != 0) {
    Tensor copy(entry->shape);
    std::memcpy(copy.data(), data, bytes);
    return copy;
  }
  // One lease per tensor, however many times it is read: a second one would release the pages
  // while the first one's views still read them.
  leases_[name] = lease;
  return Tensor::Wrap(reinterpret_cast<float*>(const_cast<uint8_t*>(data)), entry->shape,
                      std::move(lease));
}

FileBytes SafetensorsFile::bytes() const { return {{contents_->data, contents_->size}, contents_}; }

absl::StatusOr<std::vector<int64_t>> SafetensorsFile::Integers(const std::string& name) const {
  ASSIGN_OR_RETURN(const Entry* entry, Find(name));
  ASSIGN_OR_RETURN(const uint8_t* data, Read(name, *entry));
  const uint64_t bytes = entry->end - entry->begin;
  const Lease copied(contents_, data, data + bytes);  // released once widened
  std::vector<int64_t> values;
  if (entry->dtype == "I64") {
    values.resize(bytes / 8);
    std::memcpy(values.data(), data, bytes);
  } else if (entry->dtype == "I32") {
    std::vector<int32_t> narrow(bytes / 4);
    std::memcpy(narrow.data(), data, bytes);
    values.assign(narrow.begin(), narrow.end());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", name, "' is ", entry->dtype, ", expected I64 or I32"));
  }
  return values;
}

}  // namespace attnserve
