#include "engine/gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <span>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "engine/gguf/ggml_blocks.h"

namespace attnserve {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr char kAlignmentKey[] = "general.alignment";
// Writers nest arrays once at most (an array of arrays); deeper nesting is refused rather than
// recursed into.
constexpr int kMaxArrayDepth = 4;
// All metadata values, array elements included: as JSON each costs some 16 bytes whatever it
// took in the file. A vocabulary of 256 Ki tokens with scores, types and merges is about 1 Mi.
constexpr uint64_t kMaxMetadataValues = 4 * GgufFile::kMaxArrayElements;
// The least a tensor info takes: a name's length, n_dims, one dimension, the type, the offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
// The least a metadata entry takes: a key's length, the value type, a one-byte value.
constexpr uint64_t kMinEntryBytes = 8 + 4 + 1;

// GGUF's metadata value types (gguf_type).
enum ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

std::string ValueTypeName(uint32_t type) {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  return type < std::size(kNames) ? kNames[type] : absl::StrCat("value type ", type);
}

// The least bytes a value of `type` takes in the file; 0 for no type.
uint64_t MinValueBytes(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
    case kString:  // its length
      return 8;
    case kArray:  // its item type and length
      return 12;
  }
  return 0;
}

// A name from the file as messages show it: escaped, and cut short when long.
std::string Quoted(absl::string_view name) {
  constexpr size_t kShown = 100;
  return absl::StrCat("'", absl::CHexEscape(name.substr(0, kShown)),
                      name.size() > kShown ? "'..." : "'");
}

std::string ReadableTypes() {
  std::string names;
  for (uint32_t value = 0; value <= static_cast<uint32_t>(GgmlType::kBF16); ++value) {
    const auto type = static_cast<GgmlType>(value);
    if (GgmlLayout(type).has_value()) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", GgmlTypeName(type));
    }
  }
  return names;
}

// The bytes a tensor of `dims` (each positive) takes in `type`, which GgmlLayout knows; an error
// (a bare message) when its rows are not whole blocks or a size overflows.
absl::StatusOr<uint64_t> TensorBytes(const std::vector<int64_t>& dims, GgmlType type) {
  const GgmlBlockLayout layout = *GgmlLayout(type);
  int64_t elements = 1;
  for (int64_t dim : dims) {
    if (dim <= 0)
      return absl::InvalidArgumentError(absl::StrCat("dimension ", dim, " is not positive"));
    if (__builtin_mul_overflow(elements, dim, &elements)) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimensions ", ShapeToString(dims), " overflow a 64-bit element count"));
    }
  }
  if (dims.empty() || dims[0] % layout.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rows of ", dims.empty() ? 0 : dims[0],
                                                   " elements are not whole ", GgmlTypeName(type),
                                                   " blocks of ", layout.block_size));
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elements / layout.block_size),
                             static_cast<uint64_t>(layout.block_bytes), &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dimensions ", ShapeToString(dims), " overflow a 64-bit size in bytes"));
  }
  return bytes;
}

// Where a GGUF file's bytes come from: the file, open while any GgufFile or copy of it lasts
// (tensors are read when asked for), or bytes in memory (FromBytes).
class ByteSource {
 public:
  ByteSource(std::string path, int fd, const struct stat& opened)
      : path_(std::move(path)),
        fd_(fd),
        opened_(opened),
        size_(static_cast<uint64_t>(opened.st_size)) {}
  ByteSource(std::string name, std::string bytes)
      : path_(std::move(name)), bytes_(std::move(bytes)), size_(bytes_.size()) {}
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;
  ~ByteSource() {
    if (fd_ >= 0) ::close(fd_);
  }

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // as Open found it

  // Reads bytes [offset, offset + n) into `out`. The file changed on disk since Open (another
  // size or modification time) or a read that comes back short is FAILED_PRECONDITION,
  // "PATH: `what`: ...": the model is never assembled from two versions of its file.
  absl::Status Read(uint64_t offset, void* out, uint64_t n, absl::string_view what) const {
    auto fail = [&](const std::string& how) {
      return absl::FailedPreconditionError(absl::StrCat(path_, ": ", what, ": ", how));
    };
    if (offset > size_ || n > size_ - offset) {
      return fail(absl::StrCat(n, " bytes at offset ", offset, " lie past the end of the ", size_,
                               "-byte file"));
    }
    if (fd_ < 0) {
      if (n > 0) std::memcpy(out, bytes_.data() + offset, n);
      return absl::OkStatus();
    }
    struct stat now;
    if (fstat(fd_, &now) != 0 || now.st_size != opened_.st_size ||
        now.st_mtim.tv_sec != opened_.st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != opened_.st_mtim.tv_nsec) {
      return fail(absl::StrCat("the file changed on disk since it was opened (", size_,
                               " bytes then, ", now.st_size, " now)"));
    }
    auto* into = static_cast<uint8_t*>(out);
    for (uint64_t done = 0; done < n;) {
      const ssize_t got = pread(fd_, into + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return fail(absl::StrCat("read failed: ", std::strerror(errno)));
      if (got == 0) {
        return fail(absl::StrCat("the file ends at byte ", offset + done, ", short of the ", size_,
                                 " it had when opened"));
      }
      done += static_cast<uint64_t>(got);
    }
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  const int fd_ = -1;
  const struct stat opened_ {};
  const std::string bytes_;  // FromBytes' file
  const uint64_t size_ = 0;
};

// Reads the header front to back through a buffer: a few large reads rather than one per field.
class HeaderReader {
 public:
  explicit HeaderReader(const ByteSource& source) : source_(source), end_(source.size()) {}

  uint64_t position() const { return position_; }
  // Bytes left before the end: the file's, or the metadata's limit while it is read.
  uint64_t remaining() const { return end_ - position_; }
  uint64_t end() const { return end_; }
  void set_end(uint64_t end) { end_ = std::min(end, source_.size()); }

  // Reads the next n bytes, n <= remaining() (callers check, to name what is truncated).
  absl::Status Read(void* out, uint64_t n) {
    if (n > remaining()) return absl::InternalError("read past the end of the GGUF header");
    auto* into = static_cast<uint8_t*>(out);
    while (n > 0) {
      if (position_ >= buffer_start_ && position_ < buffer_start_ + buffer_.size()) {
        const uint64_t take = std::min<uint64_t>(n, buffer_start_ + buffer_.size() - position_);
        std::memcpy(into, buffer_.data() + (position_ - buffer_start_), take);
        into += take;
        position_ += take;
        n -= take;
      } else if (n >= kBufferBytes) {  // a long string goes straight into place
        RETURN_IF_ERROR(source_.Read(position_, into, n, "header"));
        position_ += n;
        return absl::OkStatus();
      } else {
        buffer_.resize(std::min<uint64_t>(kBufferBytes, source_.size() - position_));
        buffer_start_ = position_;
        RETURN_IF_ERROR(source_.Read(position_, buffer_.data(), buffer_.size(), "header"));
      }
    }
    return absl::OkStatus();
  }

 private:
  static constexpr uint64_t kBufferBytes = 64 << 10;
  const ByteSource& source_;
  uint64_t position_ = 0;
  uint64_t end_;
  std::vector<uint8_t> buffer_;
  uint64_t buffer_start_ = 0;  // the file offset of buffer_[0]
};

// Reads GGUF's fields, refusing with messages that name the file and what was being read.
class Parser {
 public:
  explicit Parser(const ByteSource& source) : source_(source), reader_(source) {}

  HeaderReader& reader() { return reader_; }
  // What errors name after the path: "metadata key 'k'", "tensor 't'", or nothing (the header).
  void set_context(std::string context) { context_ = std::move(context); }

  absl::Status Fail(absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_.path(), ": ", context_, context_.empty() ? "" : ": ", message));
  }

  // Refuses when fewer than `bytes` remain for `what`: the file is truncated, or the metadata
  // would pass its limit.
  absl::Status Need(uint64_t bytes, absl::string_view what) const {
    if (bytes <= reader_.remaining()) return absl::OkStatus();
    if (reader_.end() < source_.size() && bytes <= source_.size() - reader_.position()) {
      return Fail(absl::StrCat(what, " takes the metadata past their limit of ",
                               GgufFile::kMaxMetadataBytes, " bytes"));
    }
    return Fail(absl::StrCat("truncated: ", what, " needs ", bytes, " bytes but only ",
                             reader_.remaining(), " remain in the file"));
  }

  template <typename T>
  absl::StatusOr<T> Scalar(absl::string_view what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    T value;
    RETURN_IF_ERROR(reader_.Read(&value, sizeof(value)));
    return value;
  }

  // A u64 length, then that many bytes, as they are (UTF-8 or not). The length is checked
  // against the limit and the bytes left before anything is allocated.
  absl::StatusOr<std::string> String(absl::string_view what) {
    ASSIGN_OR_RETURN(const uint64_t length, Scalar<uint64_t>(absl::StrCat(what, "'s length")));
    if (length > GgufFile::kMaxStringBytes) {
      return Fail(absl::StrCat(what, " of ", length, " bytes exceeds the limit of ",
                               GgufFile::kMaxStringBytes));
    }
    RETURN_IF_ERROR(Need(length, what));
    std::string text(length, '\0');
    RETURN_IF_ERROR(reader_.Read(text.data(), length));
    return text;
  }

  // A metadata value of `type`; `depth` is how many arrays enclose it.
  absl::StatusOr<nlohmann::json> Value(uint32_t type, int depth) {
    switch (type) {
      case kU8:
        return Number<uint8_t>("a u8");
      case kI8:
        return Number<int8_t>("an i8");
      case kU16:
        return Number<uint16_t>("a u16");
      case kI16:
        return Number<int16_t>("an i16");
      case kU32:
        return Number<uint32_t>("a u32");
      case kI32:
        return Number<int32_t>("an i32");
      case kU64:
        return Number<uint64_t>("a u64");
      case kI64:
        return Number<int64_t>("an i64");
      case kF32: {
        ASSIGN_OR_RETURN(const float value, Scalar<float>("an f32"));
        return nlohmann::json(static_cast<double>(value));
      }
      case kF64:
        return Number<double>("an f64");
      case kBool: {
        ASSIGN_OR_RETURN(const uint8_t value, Scalar<uint8_t>("a bool"));
        if (value > 1)
          return Fail(absl::StrCat("bool value ", static_cast<int>(value), " is neither 0 nor 1"));
        return nlohmann::json(value == 1);
      }
      case kString: {
        ASSIGN_OR_RETURN(std::string text, String("a string"));
        return nlohmann::json(std::move(text));
      }
      case kArray:
        return Array(depth);
    }
    return Fail(absl::StrCat("unknown value type ", type));
  }

 private:
  template <typename T>
  absl::StatusOr<nlohmann::json> Number(absl::string_view what) {
    ASSIGN_OR_RETURN(const T value, Scalar<T>(what));
    return nlohmann::json(value);
  }

  absl::StatusOr<nlohmann::json> Array(int depth) {
    if (depth >= kMaxArrayDepth) {
      return Fail(absl::StrCat("arrays nest more than ", kMaxArrayDepth, " deep"));
    }
    ASSIGN_OR_RETURN(const uint32_t type, Scalar<uint32_t>("an array's item type"));
    ASSIGN_OR_RETURN(const uint64_t count, Scalar<uint64_t>("an array's length"));
    const uint64_t least = MinValueBytes(type);
    if (least == 0) return Fail(absl::StrCat("array of unknown value type ", type));
    if (count > GgufFile::kMaxArrayElements) {
      return Fail(absl::StrCat("array of ", count, " elements exceeds the limit of ",
                               GgufFile::kMaxArrayElements));
    }
    values_ += count;
    if (values_ > kMaxMetadataValues) {
      return Fail(absl::StrCat("the metadata hold more than ", kMaxMetadataValues, " values"));
    }
    RETURN_IF_ERROR(Need(count * least,
                         absl::StrCat("an array of ", count, " ", ValueTypeName(type), " values")));
    nlohmann::json::array_t items;
    items.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(nlohmann::json item, Value(type, depth + 1));
      items.push_back(std::move(item));
    }
    return nlohmann::json(std::move(items));
  }

  const ByteSource& source_;
  HeaderReader reader_;
  std::string context_;
  uint64_t values_ = 0;  // metadata values so far, array elements included
};

}  // namespace

struct GgufFile::Source : ByteSource {
  using ByteSource::ByteSource;
};

Shape GgufTensorInfo::shape() const { return Shape(dims.rbegin(), dims.rend()); }

absl::StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  struct stat opened;
  if (fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  return Parse(std::make_shared<const Source>(path, fd, opened));
}

absl::StatusOr<GgufFile> GgufFile::FromBytes(std::string name, std::string bytes) {
  return Parse(std::make_shared<const Source>(std::move(name), std::move(bytes)));
}

absl::StatusOr<GgufFile> GgufFile::Parse(std::shared_ptr<const Source> source) {
  Parser parser(*source);
  HeaderReader& reader = parser.reader();
  GgufFile file;
  file.path_ = source->path();

  ASSIGN_OR_RETURN(const uint32_t magic, parser.Scalar<uint32_t>("the magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) {
    const std::string bytes(reinterpret_cast<const char*>(&magic), 4);
    return parser.Fail(absl::StrCat("not a GGUF file: it begins ", Quoted(bytes), ", not 'GGUF'"));
  }
  ASSIGN_OR_RETURN(file.version_, parser.Scalar<uint32_t>("the version"));
  const uint32_t swapped = __builtin_bswap32(file.version_);
  if (file.version_ != 2 && file.version_ != 3) {
    if (swapped >= 1 && swapped <= 3) {
      return parser.Fail(absl::StrCat("a big-endian GGUF file (version ", swapped,
                                      "): only little-endian files are read"));
    }
    return parser.Fail(
        absl::StrCat("GGUF version ", file.version_, " is not supported (only 2 and 3)"));
  }
  ASSIGN_OR_RETURN(const uint64_t tensor_count, parser.Scalar<uint64_t>("the tensor count"));
  ASSIGN_OR_RETURN(const uint64_t entry_count, parser.Scalar<uint64_t>("the metadata count"));
  if (tensor_count > kMaxTensors) {
    return parser.Fail(absl::StrCat(tensor_count, " tensors exceed the limit of ", kMaxTensors));
  }
  if (entry_count > reader.remaining() / kMinEntryBytes) {
    return parser.Fail(absl::StrCat("truncated: ", entry_count, " metadata entries need at least ",
                                    kMinEntryBytes, " bytes each but only ", reader.remaining(),
                                    " remain in the file"));
  }

  // Metadata: the values in a JSON object, read under the limit of kMaxMetadataBytes.
  reader.set_end(reader.position() + kMaxMetadataBytes);
  uint32_t alignment = kDefaultAlignment;
  for (uint64_t i = 0; i < entry_count; ++i) {
    parser.set_context(absl::StrCat("metadata entry ", i));
    ASSIGN_OR_RETURN(std::string key, parser.String("the key"));
    parser.set_context(absl::StrCat("metadata key ", Quoted(key)));
    if (file.metadata_.contains(key)) return parser.Fail("appears twice");
    ASSIGN_OR_RETURN(const uint32_t type, parser.Scalar<uint32_t>("the value type"));
    ASSIGN_OR_RETURN(nlohmann::json value, parser.Value(type, 0));
    if (key == kAlignmentKey) {
      if (type != kU32) {
        return parser.Fail(absl::StrCat("is a ", ValueTypeName(type), ", not a u32"));
      }
      alignment = value.get<uint32_t>();
      if (!std::has_single_bit(alignment)) {
        return parser.Fail(absl::StrCat("alignment ", alignment, " is not a power of two"));
      }
    }
    file.metadata_.emplace(std::move(key), std::move(value));
  }
  reader.set_end(source->size());

  // Tensor infos: each one's extent checked once the data section's start is known.
  parser.set_context("");
  if (tensor_count > reader.remaining() / kMinTensorInfoBytes) {
    return parser.Fail(absl::StrCat("truncated: ", tensor_count, " tensor infos need at least ",
                                    kMinTensorInfoBytes, " bytes each but only ",
                                    reader.remaining(), " remain in the file"));
  }
  file.tensors_.reserve(tensor_count);
  std::vector<uint64_t> offsets;  // from the data section's start
  offsets.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    parser.set_context(absl::StrCat("tensor ", i));
    GgufTensorInfo tensor;
    ASSIGN_OR_RETURN(tensor.name, parser.String("the name"));
    parser.set_context(absl::StrCat("tensor ", Quoted(tensor.name)));
    if (!file.index_.emplace(tensor.name, file.tensors_.size()).second) {
      return parser.Fail("appears twice");
    }
    ASSIGN_OR_RETURN(const uint32_t n_dims, parser.Scalar<uint32_t>("the number of dimensions"));
    if (n_dims < 1 || n_dims > static_cast<uint32_t>(kMaxDims)) {
      return parser.Fail(
          absl::StrCat("has ", n_dims, " dimensions; 1 to ", kMaxDims, " are supported"));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      ASSIGN_OR_RETURN(const uint64_t dim, parser.Scalar<uint64_t>("a dimension"));
      if (dim == 0) return parser.Fail(absl::StrCat("dimension ", d, " is zero"));
      if (dim > static_cast<uint64_t>(INT64_MAX)) {
        return parser.Fail(
            absl::StrCat("dimension ", d, " is ", dim, ", negative as a signed 64-bit count"));
      }
      tensor.dims.push_back(static_cast<int64_t>(dim));
    }
    ASSIGN_OR_RETURN(const uint32_t type, parser.Scalar<uint32_t>("the type"));
    tensor.type = static_cast<GgmlType>(type);
    if (!GgmlLayout(tensor.type).has_value()) {
      return parser.Fail(
          absl::StrCat("has ggml type ", type, ", which is not read (only ", ReadableTypes(), ")"));
    }
    ASSIGN_OR_RETURN(const uint64_t offset, parser.Scalar<uint64_t>("the data offset"));
    absl::StatusOr<uint64_t> bytes = TensorBytes(tensor.dims, tensor.type);
    if (!bytes.ok()) return parser.Fail(bytes.status().message());
    tensor.bytes = *bytes;
    offsets.push_back(offset);
    file.tensors_.push_back(std::move(tensor));
  }

  // The data section begins at the first multiple of the alignment after the tensor infos.
  const uint64_t size = source->size();
  const uint64_t data_start = (reader.position() + alignment - 1) / alignment * alignment;
  for (size_t i = 0; i < file.tensors_.size(); ++i) {
    GgufTensorInfo& tensor = file.tensors_[i];
    parser.set_context(absl::StrCat("tensor ", Quoted(tensor.name)));
    if (offsets[i] % alignment != 0) {
      return parser.Fail(absl::StrCat("data offset ", offsets[i],
                                      " is not a multiple of the alignment ", alignment));
    }
    if (data_start > size || offsets[i] > size - data_start ||
        tensor.bytes > size - data_start - offsets[i]) {
      return parser.Fail(absl::StrCat(tensor.bytes, " bytes at data offset ", offsets[i],
                                      " (the data section begins at byte ", data_start,
                                      ") lie past the end of the ", size, "-byte file"));
    }
    tensor.offset = data_start + offsets[i];
  }
  file.source_ = std::move(source);
  return file;
}

const GgufTensorInfo* GgufFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<Tensor> GgufFile::Float32(const GgufTensorInfo& tensor) const {
  const Shape shape = tensor.shape();
  return Float32Rows(tensor, 0, shape.empty() ? 1 : shape[0]);
}

absl::Status GgufFile::CheckExtent(const GgufTensorInfo& tensor) const {
  absl::StatusOr<uint64_t> bytes = TensorBytes(tensor.dims, tensor.type);
  if (!bytes.ok()) return bytes.status();
  if (*bytes != tensor.bytes || tensor.offset > source_->size() ||
      tensor.bytes > source_->size() - tensor.offset) {
    return absl::InvalidArgumentError(absl::StrCat("the info's ", tensor.bytes, " bytes at offset ",
                                                   tensor.offset, " are not a tensor of the ",
                                                   source_->size(), "-byte file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> GgufFile::Float32Rows(const GgufTensorInfo& tensor, int64_t first,
                                             int64_t count) const {
  const std::string what = absl::StrCat("tensor ", Quoted(tensor.name));
  auto fail = [&](absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what, ": ", message));
  };
  if (source_ == nullptr) return absl::FailedPreconditionError("no GGUF file is open");
  // The info may not be this file's own: its extent is checked again, so nothing is read or
  // written out of bounds whatever it says.
  if (!GgmlLayout(tensor.type).has_value()) {
    return fail(absl::StrCat("has ", GgmlTypeName(tensor.type), ", which is not read"));
  }
  if (const absl::Status extent = CheckExtent(tensor); !extent.ok()) return fail(extent.message());
  Shape shape = tensor.shape();
  const int64_t rows = shape.empty() ? 1 : shape[0];
  if (first < 0 || count < 0 || first > rows || count > rows - first) {
    return fail(absl::StrCat("rows [", first, ", ", first + count, ") of ", rows));
  }
  const bool whole = first == 0 && count == rows;
  if (!whole && tensor.dims.size() != 2) return fail("rows of a tensor that is not 2-D");
  // A matrix's rows are whole blocks (TensorBytes checked the row length), each row_bytes long.
  const uint64_t row_bytes = whole ? 0 : tensor.bytes / static_cast<uint64_t>(rows);
  const uint64_t offset = tensor.offset + static_cast<uint64_t>(first) * row_bytes;
  const uint64_t length = whole ? tensor.bytes : static_cast<uint64_t>(count) * row_bytes;
  if (!shape.empty()) shape[0] = count;
  Tensor out(shape);
  const std::span<float> values(out.data(), static_cast<size_t>(out.size()));
  if (tensor.type == GgmlType::kF32) {  // read straight into place
    RETURN_IF_ERROR(source_->Read(offset, values.data(), length, what));
    return out;
  }
  auto raw = std::make_unique_for_overwrite<uint8_t[]>(length);
  RETURN_IF_ERROR(source_->Read(offset, raw.get(), length, what));
  const absl::Status status = DequantizeGgml(tensor.type, {raw.get(), length}, values);
  if (!status.ok()) return fail(status.message());
  return out;
}

absl::StatusOr<WeightGrid> GgufFile::Grid(const GgufTensorInfo& tensor) const {
  const std::string what = absl::StrCat("tensor ", Quoted(tensor.name));
  auto fail = [&](absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what, ": ", message));
  };
  if (source_ == nullptr) return absl::FailedPreconditionError("no GGUF file is open");
  const std::optional<GgmlGridShape> shape = GgmlGrid(tensor.type);
  if (!shape.has_value() || tensor.dims.size() != 2) {
    return fail(absl::StrCat("a 2-D ", GgmlTypeName(tensor.type), " tensor has no grid"));
  }
  if (const absl::Status extent = CheckExtent(tensor); !extent.ok()) return fail(extent.message());
  WeightGrid grid;
  grid.bits = shape->bits;
  grid.group_size = shape->group_size;
  grid.type = GgmlTypeName(tensor.type);
  const Shape groups = {tensor.dims[1], tensor.dims[0] / shape->group_size};
  grid.scales = Tensor(groups);
  if (grid.bits == 4) grid.minimums = Tensor(groups);
  // A slice of rows at a time, as Float32Rows reads a table: a large one is never whole here.
  const int64_t rows = tensor.dims[1], row_groups = groups[1];
  if (rows == 0) return grid;
  const uint64_t row_bytes = tensor.bytes / static_cast<uint64_t>(rows);
  constexpr int64_t kSliceRows = 4096;
  auto raw = std::make_unique_for_overwrite<uint8_t[]>(std::min(rows, kSliceRows) * row_bytes);
  for (int64_t first = 0; first < rows; first += kSliceRows) {
    const int64_t count = std::min(kSliceRows, rows - first);
    const uint64_t length = static_cast<uint64_t>(count) * row_bytes;
    RETURN_IF_ERROR(source_->Read(tensor.offset + first * row_bytes, raw.get(), length, what));
    const auto values = static_cast<size_t>(count * row_groups);
    const absl::Status status = GgmlGroupScales(
        tensor.type, {raw.get(), length}, {grid.scales.row(first), values},
        {grid.bits == 4 ? grid.minimums.row(first) : nullptr, grid.bits == 4 ? values : 0});
    if (!status.ok()) return fail(status.message());
  }
  return grid;
}

}  // namespace attnserve
