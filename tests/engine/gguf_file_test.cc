#include "engine/gguf/gguf_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/gguf/ggml_blocks.h"
#include "engine/quantized_weight.h"

namespace attnserve {
namespace {

// GGUF's metadata value types.
enum : uint32_t {
  kU8,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kF32,
  kBool,
  kString,
  kArray,
  kU64,
  kI64,
  kF64
};

template <typename T>
std::string Le(T value) {
  std::string bytes(sizeof(T), '\0');
  std::memcpy(bytes.data(), &value, sizeof(T));
  return bytes;
}
std::string Str(const std::string& text) { return Le<uint64_t>(text.size()) + text; }
std::string Array(uint32_t type, uint64_t count, const std::string& items) {
  return Le(type) + Le(count) + items;
}
uint64_t RoundUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// fp16 bit patterns of the scales the hand-built blocks use.
constexpr uint16_t kHalf0_25 = 0x3400, kHalf0_5 = 0x3800, kHalf1 = 0x3C00, kHalf2 = 0x4000,
                   kHalf3 = 0x4200, kHalfMinus1_25 = 0xBD00;

// Writes a GGUF file field by field: valid as built, and every field can be set to something
// invalid.
struct Writer {
  std::string magic = "GGUF";
  uint32_t version = 3;
  uint32_t alignment = 32;  // lays out the data; the key itself is an entry like any other
  std::optional<uint64_t> tensor_count, entry_count;  // the counts written, if not the real ones
  std::vector<std::string> entries;
  struct TensorSpec {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::string data;
    std::optional<uint64_t> offset;  // from the data section; else the next aligned one
  };
  std::vector<TensorSpec> tensors;

  Writer& Entry(const std::string& key, uint32_t type, const std::string& value) {
    entries.push_back(Str(key) + Le(type) + value);
    return *this;
  }
  Writer& Add(const std::string& name, std::vector<uint64_t> dims, uint32_t type, std::string data,
              std::optional<uint64_t> offset = std::nullopt) {
    tensors.push_back({name, std::move(dims), type, std::move(data), offset});
    return *this;
  }
  Writer& Add(const std::string& name, std::vector<uint64_t> dims, GgmlType type,
              std::string data) {
    return Add(name, std::move(dims), static_cast<uint32_t>(type), std::move(data));
  }

  std::string Build() const {
    std::string out = magic + Le(version) + Le(tensor_count.value_or(tensors.size())) +
                      Le(entry_count.value_or(entries.size()));
    for (const std::string& entry : entries) out += entry;
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const TensorSpec& t : tensors) {
      offsets.push_back(t.offset.value_or(next));
      next = RoundUp(offsets.back() + t.data.size(), alignment);
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      out += Str(tensors[i].name) + Le<uint32_t>(tensors[i].dims.size());
      for (uint64_t dim : tensors[i].dims) out += Le(dim);
      out += Le(tensors[i].type) + Le(offsets[i]);
    }
    if (tensors.empty()) return out;  // ends with the metadata
    const uint64_t data_start = RoundUp(out.size(), alignment);
    out.resize(data_start, '\0');
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].data.empty()) continue;
      const uint64_t at = data_start + offsets[i];
      if (out.size() < at + tensors[i].data.size()) out.resize(at + tensors[i].data.size(), '\0');
      out.replace(at, tensors[i].data.size(), tensors[i].data);
    }
    return out;
  }
};

std::string Floats(const std::vector<float>& values) {
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}
std::string Halves(const std::vector<uint16_t>& values) {
  std::string bytes(values.size() * 2, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Parsing must fail with INVALID_ARGUMENT and a message naming the file and holding each of
// `fragments` (the key or tensor, and what is wrong).
void ExpectRefused(const std::string& bytes, const std::vector<std::string>& fragments) {
  auto file = GgufFile::FromBytes("bad.gguf", bytes);
  ASSERT_FALSE(file.ok()) << "accepted";
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  EXPECT_TRUE(absl::StartsWith(file.status().message(), "bad.gguf: ")) << file.status();
  for (const std::string& fragment : fragments) {
    EXPECT_TRUE(absl::StrContains(file.status().message(), fragment))
        << file.status() << "\nlacks: " << fragment;
  }
}

// A file of one tensor, dequantized.
Tensor Dequantized(GgmlType type, std::vector<uint64_t> dims, const std::string& data) {
  auto file = GgufFile::FromBytes("t.gguf", Writer().Add("t", std::move(dims), type, data).Build());
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return Tensor();
  auto tensor = file->Float32(file->tensors()[0]);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  return tensor.ok() ? *tensor : Tensor();
}

// Every metadata value type, in one file.
Writer EveryValueType() {
  Writer w;
  w.Entry("general.architecture", kString, Str("llama"))
      .Entry("u8", kU8, Le<uint8_t>(200))
      .Entry("i8", kI8, Le<int8_t>(-100))
      .Entry("u16", kU16, Le<uint16_t>(60000))
      .Entry("i16", kI16, Le<int16_t>(-30000))
      .Entry("u32", kU32, Le<uint32_t>(4000000000u))
      .Entry("i32", kI32, Le<int32_t>(-2000000000))
      .Entry("f32", kF32, Le<float>(0.1f))
      .Entry("true", kBool, Le<uint8_t>(1))
      .Entry("false", kBool, Le<uint8_t>(0))
      .Entry("u64", kU64, Le<uint64_t>(std::numeric_limits<uint64_t>::max()))
      .Entry("i64", kI64, Le<int64_t>(std::numeric_limits<int64_t>::min()))
      .Entry("f64", kF64, Le<double>(0.1))
      .Entry("tokens", kArray, Array(kString, 3, Str("a") + Str("") + Str("<s>")))
      .Entry("scores", kArray, Array(kF32, 2, Le<float>(-1.5f) + Le<float>(2.0f)))
      .Entry("types", kArray, Array(kI32, 2, Le<int32_t>(1) + Le<int32_t>(-3)))
      .Entry("empty", kArray, Array(kU8, 0, ""))
      .Entry(
          "nested", kArray,
          Array(kArray, 2,
                Array(kU16, 2, Le<uint16_t>(1) + Le<uint16_t>(2)) + Array(kString, 1, Str("x"))));
  return w;
}

TEST(GgufFileTest, ReadsMetadataOfEveryType) {
  auto file = GgufFile::FromBytes("m.gguf", EveryValueType().Build());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->path(), "m.gguf");
  const nlohmann::json& m = file->metadata();
  EXPECT_EQ(m.size(), 18u);
  EXPECT_EQ(m["general.architecture"], "llama");
  EXPECT_TRUE(m["u8"].is_number_unsigned());
  EXPECT_EQ(m["u8"].get<int>(), 200);
  EXPECT_TRUE(m["i8"].is_number_integer());
  EXPECT_EQ(m["i8"].get<int>(), -100);
  EXPECT_EQ(m["u16"].get<int>(), 60000);
  EXPECT_EQ(m["i16"].get<int>(), -30000);
  EXPECT_EQ(m["u32"].get<uint32_t>(), 4000000000u);
  EXPECT_EQ(m["i32"].get<int32_t>(), -2000000000);
  EXPECT_TRUE(m["f32"].is_number_float());
  EXPECT_EQ(m["f32"].get<double>(), static_cast<double>(0.1f));  // the float, widened exactly
  EXPECT_EQ(m["true"], true);
  EXPECT_EQ(m["false"], false);
  EXPECT_EQ(m["u64"].get<uint64_t>(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(m["i64"].get<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(m["f64"].get<double>(), 0.1);
  EXPECT_EQ(m["tokens"], nlohmann::json({"a", "", "<s>"}));
  EXPECT_EQ(m["scores"], nlohmann::json({-1.5, 2.0}));
  EXPECT_EQ(m["types"], nlohmann::json({1, -3}));
  EXPECT_TRUE(m["empty"].is_array());
  EXPECT_TRUE(m["empty"].empty());
  EXPECT_EQ(m["nested"], nlohmann::json::parse(R"([[1, 2], ["x"]])"));
  EXPECT_TRUE(file->tensors().empty());
}

TEST(GgufFileTest, ReadsTensorsInShapeOrder) {
  Writer w = EveryValueType();
  w.Add("a", {3, 2}, GgmlType::kF32, Floats({0, 1, 2, 3, 4, 5}))
      .Add("b", {2, 1, 2}, GgmlType::kF32, Floats({6, 7, 8, 9}))
      .Add("q", {32, 2}, GgmlType::kQ8_0, std::string(68, '\0'));
  const std::string bytes = w.Build();
  auto file = GgufFile::FromBytes("t.gguf", bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors().size(), 3u);
  const GgufTensorInfo* a = file->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a->shape(), (Shape{2, 3}));
  EXPECT_EQ(a->type, GgmlType::kF32);
  EXPECT_EQ(a->bytes, 24u);
  EXPECT_EQ(a->offset % 32, 0u);
  float first;
  std::memcpy(&first, bytes.data() + a->offset + 4, 4);
  EXPECT_EQ(first, 1.0f);  // offsets count from the start of the file
  EXPECT_EQ(file->Find("b")->offset, a->offset + 32);
  EXPECT_EQ(file->Find("q")->bytes, 68u);
  EXPECT_EQ(file->Find("nope"), nullptr);

  auto t = file->Float32(*a);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{2, 3}));
  EXPECT_EQ(t->row(1)[0], 3.0f);
  auto b = file->Float32(*file->Find("b"));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(b->data()[3], 9.0f);
  auto q = file->Float32(*file->Find("q"));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->shape(), (Shape{2, 32}));
}

// A slice of a matrix's rows reads and dequantizes just those rows: the same values as the whole
// tensor's; a range outside the rows, or rows of a tensor that is not 2-D, is refused.
TEST(GgufFileTest, ReadsASliceOfRows) {
  std::string blocks;
  for (int row = 0; row < 4; ++row) {
    for (int block = 0; block < 2; ++block) {
      blocks += std::string("\x00\x3c", 2);  // f16 1.0
      for (int i = 0; i < 32; ++i) blocks += static_cast<char>(row * 10 + block * 3 + i % 5 - 2);
    }
  }
  Writer w = EveryValueType();
  w.Add("q", {64, 4}, GgmlType::kQ8_0, blocks)
      .Add("b", {2, 1, 2}, GgmlType::kF32, Floats({6, 7, 8, 9}));
  const std::string bytes = w.Build();
  auto file = GgufFile::FromBytes("t.gguf", bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  auto whole = file->Float32(*file->Find("q"));
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto slice = file->Float32Rows(*file->Find("q"), 1, 2);
  ASSERT_TRUE(slice.ok()) << slice.status();
  ASSERT_EQ(slice->shape(), (Shape{2, 64}));
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 64; ++i) ASSERT_EQ(slice->row(r)[i], whole->row(r + 1)[i]) << r << " " << i;
  }
  EXPECT_EQ(slice->row(0)[0], 8.0f);
  EXPECT_EQ(file->Float32Rows(*file->Find("q"), 3, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->Float32Rows(*file->Find("q"), -1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status not_matrix = file->Float32Rows(*file->Find("b"), 0, 1).status();
  EXPECT_TRUE(absl::StrContains(not_matrix.message(), "not 2-D")) << not_matrix;
}

// Random blocks of a type, with its f16 scale fields (byte offsets in each block) set to small
// values: rows of `row_blocks` blocks.
std::string RandomBlocks(GgmlType type, int64_t blocks, const std::vector<int>& scale_offsets,
                         uint32_t seed) {
  const GgmlBlockLayout layout = *GgmlLayout(type);
  std::mt19937 rng(seed);
  std::string out(static_cast<size_t>(blocks * layout.block_bytes), '\0');
  for (char& byte : out) byte = static_cast<char>(rng());
  for (int64_t b = 0; b < blocks; ++b) {
    for (int offset : scale_offsets) {
      const uint16_t half = static_cast<uint16_t>(0x1c00 + rng() % 0x0800);  // 2^-8 to 2^-7
      std::memcpy(out.data() + b * layout.block_bytes + offset, &half, sizeof half);
    }
  }
  return out;
}

// Every type with a grid (GgmlGrid) is kept exactly on it: the weight QuantizedWeight::OnGrid
// makes from the file's grid and dequantized rows gives back those rows bit for bit, in int4 (f16
// scales for Q4_0 and Q4_1, floats for Q4_K's sub-block products) or int8 (groups of 32, or Q3_K
// and Q6_K's sub-blocks of 16). Types without one say so.
TEST(GgufFileTest, KeepsEveryGridTypeExactlyOnItsGrid) {
  struct Case {
    GgmlType type;
    std::vector<int> scale_offsets;
    int bits;
    int64_t group_size;
    bool f16;
  };
  const int64_t rows = 70, k = 512;  // two panels, the second partial
  for (const Case& c :
       {Case{GgmlType::kQ4_0, {0}, 4, 32, true}, Case{GgmlType::kQ4_1, {0, 2}, 4, 32, true},
        Case{GgmlType::kQ4_K, {0, 2}, 4, 32, false}, Case{GgmlType::kQ8_0, {0}, 8, 32, true},
        Case{GgmlType::kQ5_0, {0}, 8, 32, true}, Case{GgmlType::kQ3_K, {108}, 8, 16, true},
        Case{GgmlType::kQ6_K, {208}, 8, 16, true}}) {
    const std::string name = GgmlTypeName(c.type);
    const GgmlBlockLayout layout = *GgmlLayout(c.type);
    const std::string blocks =
        RandomBlocks(c.type, rows * k / layout.block_size, c.scale_offsets, 7);
    auto file = GgufFile::FromBytes(
        "t.gguf", Writer().Add("w", {static_cast<uint64_t>(k), rows}, c.type, blocks).Build());
    ASSERT_TRUE(file.ok()) << file.status();
    const GgufTensorInfo& info = file->tensors()[0];
    absl::StatusOr<WeightGrid> grid = file->Grid(info);
    ASSERT_TRUE(grid.ok()) << name << ": " << grid.status();
    EXPECT_EQ(grid->bits, c.bits) << name;
    EXPECT_EQ(grid->group_size, c.group_size) << name;
    EXPECT_EQ(grid->type, name);
    absl::StatusOr<Tensor> values = file->Float32(info);
    ASSERT_TRUE(values.ok()) << values.status();
    absl::StatusOr<QuantizedWeight> kept = QuantizedWeight::OnGrid(*values, *grid, true);
    ASSERT_TRUE(kept.ok()) << name << ": " << kept.status();
    EXPECT_EQ(kept->bits(), c.bits) << name;
    if (c.bits == 4) {
      EXPECT_EQ(kept->int4_scales(0).halves != nullptr, c.f16) << name;
    }
    const Tensor back = kept->Dequantize();
    for (int64_t i = 0; i < back.size(); ++i) {
      ASSERT_EQ(back.data()[i], values->data()[i]) << name << " element " << i;
    }
  }
  for (GgmlType type : {GgmlType::kQ5_1, GgmlType::kQ5_K, GgmlType::kQ2_K, GgmlType::kF16}) {
    EXPECT_FALSE(GgmlGrid(type).has_value()) << GgmlTypeName(type);
  }
  auto file = GgufFile::FromBytes(
      "t.gguf",
      Writer().Add("f", {32, 2}, GgmlType::kF16, Halves(std::vector<uint16_t>(64))).Build());
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::Status none = file->Grid(file->tensors()[0]).status();
  EXPECT_TRUE(absl::StrContains(none.message(), "t.gguf: tensor 'f'")) << none;
}

TEST(GgufFileTest, ReadsVersion2) {
  Writer w = EveryValueType();
  w.version = 2;
  w.Add("a", {2}, GgmlType::kF32, Floats({1.5f, -2}));
  auto file = GgufFile::FromBytes("v2.gguf", w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(file->metadata()["tokens"][2], "<s>");
  auto a = file->Float32(file->tensors()[0]);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data()[1], -2.0f);
}

TEST(GgufFileTest, KeepsStringsThatAreNotUtf8AsTheyAre) {
  const std::string bytes("\xff\xfe\x80 \xc3", 5);
  auto file = GgufFile::FromBytes(
      "u.gguf", Writer().Entry("s", kString, Str(bytes)).Entry(bytes, kU8, Le<uint8_t>(1)).Build());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata()["s"].get<std::string>(), bytes);
  EXPECT_TRUE(file->metadata().contains(bytes));
}

TEST(GgufFileTest, LaysOutDataAtTheFilesAlignment) {
  Writer w;
  w.alignment = 64;
  w.Entry(std::string("general.alignment"), kU32, Le<uint32_t>(64))
      .Add("a", {3}, GgmlType::kF32, Floats({1, 2, 3}))
      .Add("b", {1}, GgmlType::kF32, Floats({4}));
  auto file = GgufFile::FromBytes("aligned.gguf", w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors()[0].offset % 64, 0u);
  EXPECT_EQ(file->tensors()[1].offset, file->tensors()[0].offset + 64);
  EXPECT_EQ(file->Float32(file->tensors()[1])->data()[0], 4.0f);
  // Without the key, the default alignment of 32 applies.
  Writer w32 = w;
  w32.alignment = 32;
  w32.entries.clear();
  w32.Entry("general.alignmenx", kU32, Le<uint32_t>(64));  // same length, not the key
  auto other = GgufFile::FromBytes("a32.gguf", w32.Build());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->tensors()[1].offset, other->tensors()[0].offset + 32);
}

TEST(GgufFileTest, RefusesBadMagic) {
  Writer w;
  w.magic = "GGML";
  ExpectRefused(w.Build(), {"not a GGUF file", "'GGML'"});
  ExpectRefused("GG", {"truncated", "magic"});
  ExpectRefused("", {"truncated"});
}

TEST(GgufFileTest, RefusesOtherVersions) {
  Writer w;
  w.version = 1;
  ExpectRefused(w.Build(), {"GGUF version 1 is not supported"});
  w.version = 4;
  ExpectRefused(w.Build(), {"GGUF version 4 is not supported"});
}

TEST(GgufFileTest, RefusesBigEndianFiles) {
  Writer w;
  w.version = 0x03000000;  // 3, big-endian
  ExpectRefused(w.Build(), {"big-endian", "little-endian"});
}

TEST(GgufFileTest, RefusesTooManyTensors) {
  Writer w;
  w.tensor_count = GgufFile::kMaxTensors + 1;
  ExpectRefused(w.Build(), {"tensors exceed the limit"});
  w.tensor_count = 1000;  // within the limit, but past the file's bytes
  ExpectRefused(w.Build(), {"truncated", "1000 tensor infos"});
}

TEST(GgufFileTest, RefusesMoreEntriesThanTheFileHolds) {
  Writer w;
  w.entry_count = uint64_t{1} << 60;
  ExpectRefused(w.Build(), {"truncated", "metadata entries"});
  w.Entry("a", kString, Str(std::string(40, 'a')));
  w.entry_count = 2;
  ExpectRefused(w.Build() + "\x05\0\0", {"truncated", "metadata entry 1", "key's length"});
}

TEST(GgufFileTest, RefusesAStringLongerThanTheFile) {
  Writer w;
  w.Entry("general.name", kString, Le<uint64_t>(1000) + "abc");
  ExpectRefused(w.Build(), {"metadata key 'general.name'", "truncated", "1000 bytes"});
  Writer key;
  key.entries.push_back(Le<uint64_t>(500) + "general.n");
  ExpectRefused(key.Build(), {"metadata entry 0", "truncated", "500 bytes"});
}

TEST(GgufFileTest, RefusesAStringOverTheLimit) {
  Writer w;
  w.Entry("chat_template", kString, Le<uint64_t>(GgufFile::kMaxStringBytes + 1));
  ExpectRefused(w.Build(), {"metadata key 'chat_template'", "exceeds the limit"});
}

TEST(GgufFileTest, RefusesAnArrayLongerThanTheFile) {
  Writer w;
  w.Entry("tokenizer.ggml.scores", kArray, Array(kF32, 1000, Le<float>(1)));
  ExpectRefused(w.Build(), {"metadata key 'tokenizer.ggml.scores'", "truncated", "1000 f32"});
  Writer strings;
  strings.Entry("tokens", kArray, Array(kString, 3, Str("a") + Str("b")));
  ExpectRefused(strings.Build(), {"metadata key 'tokens'", "truncated"});
}

TEST(GgufFileTest, RefusesAnArrayOverTheLimit) {
  Writer w;
  w.Entry("tokenizer.ggml.tokens", kArray, Array(kString, GgufFile::kMaxArrayElements + 1, ""));
  ExpectRefused(w.Build(), {"metadata key 'tokenizer.ggml.tokens'", "exceeds the limit"});
}

TEST(GgufFileTest, RefusesArraysNestedTooDeep) {
  std::string value = Array(kU8, 1, Le<uint8_t>(7));
  for (int i = 0; i < 10; ++i) value = Array(kArray, 1, value);
  ExpectRefused(Writer().Entry("deep", kArray, value).Build(), {"metadata key 'deep'", "nest"});
}

TEST(GgufFileTest, RefusesUnknownValueTypes) {
  ExpectRefused(Writer().Entry("odd", 13, Le<uint32_t>(0)).Build(),
                {"metadata key 'odd'", "unknown value type 13"});
  ExpectRefused(Writer().Entry("odd", kArray, Array(99, 1, "x")).Build(),
                {"metadata key 'odd'", "unknown value type 99"});
}

TEST(GgufFileTest, RefusesABoolThatIsNeither0Nor1) {
  ExpectRefused(Writer().Entry("flag", kBool, Le<uint8_t>(2)).Build(),
                {"metadata key 'flag'", "bool value 2"});
}

TEST(GgufFileTest, RefusesADuplicateKey) {
  ExpectRefused(Writer()
                    .Entry("general.name", kU8, Le<uint8_t>(1))
                    .Entry("general.name", kU8, Le<uint8_t>(2))
                    .Build(),
                {"metadata key 'general.name'", "appears twice"});
}

TEST(GgufFileTest, RefusesAnAlignmentThatIsNotAPowerOfTwo) {
  for (uint32_t alignment : {0u, 24u, 96u}) {
    ExpectRefused(Writer().Entry("general.alignment", kU32, Le(alignment)).Build(),
                  {"metadata key 'general.alignment'", "not a power of two"});
  }
  ExpectRefused(Writer().Entry("general.alignment", kU64, Le<uint64_t>(32)).Build(),
                {"metadata key 'general.alignment'", "not a u32"});
}

TEST(GgufFileTest, RefusesADuplicateTensorName) {
  ExpectRefused(Writer()
                    .Add("w", {1}, GgmlType::kF32, Floats({1}))
                    .Add("w", {1}, GgmlType::kF32, Floats({2}))
                    .Build(),
                {"tensor 'w'", "appears twice"});
}

TEST(GgufFileTest, RefusesBadDimensions) {
  ExpectRefused(Writer().Add("zero", {4, 0}, GgmlType::kF32, "").Build(),
                {"tensor 'zero'", "dimension 1 is zero"});
  ExpectRefused(Writer().Add("neg", {~uint64_t{0}}, GgmlType::kF32, "").Build(),
                {"tensor 'neg'", "dimension 0 is 18446744073709551615, negative"});
  ExpectRefused(
      Writer().Add("big", {uint64_t{1} << 40, uint64_t{1} << 40}, GgmlType::kF32, "").Build(),
      {"tensor 'big'", "overflow"});
  // Elements fit 64 bits, bytes do not.
  ExpectRefused(Writer().Add("bytes", {uint64_t{1} << 62}, GgmlType::kF32, "").Build(),
                {"tensor 'bytes'", "overflow"});
  ExpectRefused(Writer().Add("scalar", {}, GgmlType::kF32, Floats({1})).Build(),
                {"tensor 'scalar'", "has 0 dimensions"});
  ExpectRefused(Writer().Add("five", {1, 1, 1, 1, 1}, GgmlType::kF32, Floats({1})).Build(),
                {"tensor 'five'", "has 5 dimensions"});
}

TEST(GgufFileTest, RefusesUnknownTensorTypes) {
  ExpectRefused(Writer().Add("iq", {256}, 16, std::string(66, '\0')).Build(),
                {"tensor 'iq'", "ggml type 16", "Q4_K"});
  ExpectRefused(Writer().Add("x", {4}, 1000, std::string(16, '\0')).Build(),
                {"tensor 'x'", "ggml type 1000"});
}

TEST(GgufFileTest, RefusesRowsThatAreNotWholeBlocks) {
  ExpectRefused(Writer().Add("w", {16, 2}, GgmlType::kQ4_0, std::string(18, '\0')).Build(),
                {"tensor 'w'", "rows of 16 elements", "Q4_0 blocks of 32"});
  ExpectRefused(Writer().Add("k", {128}, GgmlType::kQ6_K, std::string(210, '\0')).Build(),
                {"tensor 'k'", "Q6_K blocks of 256"});
}

TEST(GgufFileTest, RefusesMisalignedData) {
  ExpectRefused(
      Writer().Add("w", {2}, static_cast<uint32_t>(GgmlType::kF32), Floats({1, 2}), 8).Build(),
      {"tensor 'w'", "offset 8 is not a multiple of the alignment 32"});
}

TEST(GgufFileTest, RefusesDataPastTheEnd) {
  std::string bytes =
      Writer().Add("w", {8}, GgmlType::kF32, Floats({1, 2, 3, 4, 5, 6, 7, 8})).Build();
  bytes.resize(bytes.size() - 1);
  ExpectRefused(bytes, {"tensor 'w'", "past the end"});
  ExpectRefused(
      Writer()
          .Add("far", {1}, static_cast<uint32_t>(GgmlType::kF32), "", ~uint64_t{0} / 32 * 32)
          .Build(),
      {"tensor 'far'", "past the end"});
}

// Every prefix of a valid file is refused, whatever field it cuts.
TEST(GgufFileTest, RefusesEveryTruncation) {
  Writer w = EveryValueType();
  w.Add("a", {3}, GgmlType::kF32, Floats({1, 2, 3}));
  const std::string bytes = w.Build();
  ASSERT_TRUE(GgufFile::FromBytes("whole.gguf", bytes).ok());
  for (size_t size = 0; size < bytes.size(); ++size) {
    auto file = GgufFile::FromBytes("cut.gguf", bytes.substr(0, size));
    ASSERT_FALSE(file.ok()) << "a prefix of " << size << " bytes was accepted";
    EXPECT_TRUE(absl::StartsWith(file.status().message(), "cut.gguf: ")) << file.status();
  }
}

class GgufFileOnDiskTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& bytes, const std::string& name) {
    const std::string path = absl::StrCat(::testing::TempDir(), "/", name, ".gguf");
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
};

TEST_F(GgufFileOnDiskTest, OpensAFile) {
  Writer w = EveryValueType();
  // A long string and many values: the header takes several of Open's buffered reads.
  w.Entry("long", kString, Str(std::string(200000, 'x')));
  std::string many;
  for (int i = 0; i < 50000; ++i) many += Le<int32_t>(i);
  w.Entry("many", kArray, Array(kI32, 50000, many));
  w.Add("a", {4}, GgmlType::kF32, Floats({1, 2, 3, 4}))
      .Add("h", {2}, GgmlType::kF16, Halves({kHalf0_5, kHalf3}));
  const std::string path = Write(w.Build(), "open");
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->metadata()["long"].get<std::string>().size(), 200000u);
  EXPECT_EQ(file->metadata()["many"][49999], 49999);
  EXPECT_EQ(file->metadata()["u16"], 60000);
  EXPECT_EQ(file->Float32(*file->Find("a"))->data()[3], 4.0f);
  EXPECT_EQ(file->Float32(*file->Find("h"))->data()[1], 3.0f);
}

TEST_F(GgufFileOnDiskTest, RefusesAMalformedFileNamingItsPath) {
  const std::string path = Write(std::string("GGUF\x01\0\0\0", 8), "v1");
  auto file = GgufFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(),
            absl::StrCat(path, ": GGUF version 1 is not supported (only 2 and 3)"));
  auto missing = GgufFile::Open("/nonexistent/model.gguf");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "/nonexistent/model.gguf"));
}

// A file truncated (or rewritten) after Open is FAILED_PRECONDITION naming the file and the
// tensor, not a crash or a tensor of stale or missing bytes.
TEST_F(GgufFileOnDiskTest, RefusesAFileThatChangedSinceOpen) {
  std::vector<float> values(1024);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const std::string path = Write(Writer()
                                     .Add("first", {1024}, GgmlType::kF32, Floats(values))
                                     .Add("second", {32}, GgmlType::kQ8_0, std::string(34, '\1'))
                                     .Build(),
                                 "truncated");
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE(file->Float32(*file->Find("second")).ok());
  std::filesystem::resize_file(path, file->Find("first")->offset + 100);
  for (const char* name : {"first", "second"}) {
    auto tensor = file->Float32(*file->Find(name));
    ASSERT_FALSE(tensor.ok()) << name;
    EXPECT_EQ(tensor.status().code(), absl::StatusCode::kFailedPrecondition) << tensor.status();
    EXPECT_TRUE(absl::StrContains(tensor.status().message(), path)) << tensor.status();
    EXPECT_TRUE(absl::StrContains(tensor.status().message(), absl::StrCat("tensor '", name, "'")))
        << tensor.status();
  }
}

// An info that is not the file's (or was changed) is refused rather than read out of bounds.
TEST(GgufFileTest, RefusesATensorInfoThatIsNotTheFiles) {
  auto file = GgufFile::FromBytes(
      "f.gguf", Writer().Add("a", {4}, GgmlType::kF32, Floats({1, 2, 3, 4})).Build());
  ASSERT_TRUE(file.ok()) << file.status();
  GgufTensorInfo forged = file->tensors()[0];
  forged.dims = {4096};
  EXPECT_FALSE(file->Float32(forged).ok());
  forged.bytes = 4096 * 4;
  EXPECT_FALSE(file->Float32(forged).ok());
  forged = file->tensors()[0];
  forged.type = GgmlType::kQ8_0;
  EXPECT_FALSE(file->Float32(forged).ok());
  forged.type = static_cast<GgmlType>(99);
  EXPECT_FALSE(file->Float32(forged).ok());
  EXPECT_FALSE(GgufFile().Float32(file->tensors()[0]).ok());
}

TEST(GgufFileTest, WidensFloatTypesExactly) {
  const std::vector<float> f32 = {1.5f, -0.0f, 3.4e38f, std::ldexp(1.0f, -149),
                                  std::numeric_limits<float>::infinity()};
  Tensor a = Dequantized(GgmlType::kF32, {5}, Floats(f32));
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(a.data()[i], f32[i]) << i;
  EXPECT_TRUE(std::signbit(a.data()[1]));

  // 1.5, -2, 65504 (the largest half), 2^-24 (the smallest subnormal), 2^-14 - 2^-24 (the
  // largest subnormal), -0, -infinity, NaN (left for the caller).
  const std::vector<uint16_t> halves = {0x3E00, 0xC000, 0x7BFF, 0x0001,
                                        0x03FF, 0x8000, 0xFC00, 0x7E00};
  Tensor h = Dequantized(GgmlType::kF16, {8}, Halves(halves));
  const std::vector<float> expected_h = {1.5f,
                                         -2.0f,
                                         65504.0f,
                                         std::ldexp(1.0f, -24),
                                         std::ldexp(1.0f, -14) - std::ldexp(1.0f, -24),
                                         -0.0f,
                                         -std::numeric_limits<float>::infinity()};
  for (size_t i = 0; i < expected_h.size(); ++i) EXPECT_EQ(h.data()[i], expected_h[i]) << i;
  EXPECT_TRUE(std::signbit(h.data()[5]));
  EXPECT_TRUE(std::isnan(h.data()[7]));
  // Every half against the hardware's conversion through float arithmetic.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = Fp16ToFloat(static_cast<uint16_t>(bits));
    const uint32_t exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
    if (exponent == 0x1f) {
      EXPECT_EQ(std::isnan(value), mantissa != 0) << bits;
      continue;
    }
    const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                                          : std::ldexp(static_cast<float>(mantissa | 0x400),
                                                       static_cast<int>(exponent) - 25);
    ASSERT_EQ(value, (bits & 0x8000) ? -magnitude : magnitude) << bits;
    ASSERT_EQ(std::signbit(value), (bits & 0x8000) != 0) << bits;
  }

  // bfloat16: 1.5, -2, 2^-133 (a float subnormal), the float's top half.
  const std::vector<uint16_t> bf16 = {0x3FC0, 0xC000, 0x0001, 0x7F62};
  Tensor b = Dequantized(GgmlType::kBF16, {2, 2}, Halves(bf16));
  EXPECT_EQ(b.shape(), (Shape{2, 2}));
  uint32_t bits = 0x7F620000;
  float big;
  std::memcpy(&big, &bits, sizeof(big));
  const std::vector<float> expected_b = {1.5f, -2.0f, std::ldexp(1.0f, -133), big};
  for (size_t i = 0; i < expected_b.size(); ++i) EXPECT_EQ(b.data()[i], expected_b[i]) << i;
}

// The quantized blocks below are built from values by each format's layout (ggml-common.h),
// with scales that keep every product exact.

TEST(GgufFileTest, DequantizesQ8_0) {
  // Two rows of one block: d = 0.5 with int8s -128 ... and d = -2 with 0, 1, ...
  std::string data = Le(kHalf0_5);
  for (int i = 0; i < 32; ++i) data += static_cast<char>(static_cast<int8_t>(i * 8 - 128));
  data += Le<uint16_t>(0xC000);
  for (int i = 0; i < 32; ++i) data += static_cast<char>(i);
  Tensor t = Dequantized(GgmlType::kQ8_0, {32, 2}, data);
  ASSERT_EQ(t.shape(), (Shape{2, 32}));
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(t.row(0)[i], 0.5f * static_cast<float>(i * 8 - 128)) << i;
    EXPECT_EQ(t.row(1)[i], -2.0f * static_cast<float>(i)) << i;
  }
}

// 32 values 0-15 as Q4_0 and Q4_1 pack them: element j in byte j's low nibble, j + 16 in its
// high one.
std::string Nibbles(const std::vector<int>& q) {
  std::string bytes(16, '\0');
  for (int j = 0; j < 16; ++j) bytes[j] = static_cast<char>(q[j] | q[j + 16] << 4);
  return bytes;
}

TEST(GgufFileTest, DequantizesQ4_0) {
  std::vector<int> q(32);
  for (int i = 0; i < 32; ++i) q[i] = (i * 7) % 16;
  Tensor t = Dequantized(GgmlType::kQ4_0, {32}, Le(kHalf0_25) + Nibbles(q));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(t.data()[i], 0.25f * static_cast<float>(q[i] - 8)) << i;
}

TEST(GgufFileTest, DequantizesQ4_1) {
  std::vector<int> q(32);
  for (int i = 0; i < 32; ++i) q[i] = (i * 5 + 3) % 16;
  Tensor t = Dequantized(GgmlType::kQ4_1, {32}, Le(kHalf0_5) + Le(kHalfMinus1_25) + Nibbles(q));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(t.data()[i], 0.5f * static_cast<float>(q[i]) - 1.25f) << i;
}

// Q5_0 and Q5_1: the low four bits as Q4_0's, the fifth bit of element i in bit i of a u32.
std::string FiveBits(const std::vector<int>& q) {
  uint32_t high = 0;
  std::vector<int> low(32);
  for (int i = 0; i < 32; ++i) {
    low[i] = q[i] & 15;
    high |= static_cast<uint32_t>(q[i] >> 4) << i;
  }
  return Le(high) + Nibbles(low);
}

TEST(GgufFileTest, DequantizesQ5_0AndQ5_1) {
  std::vector<int> q(32);
  for (int i = 0; i < 32; ++i) q[i] = (i * 13 + 5) % 32;
  Tensor t = Dequantized(GgmlType::kQ5_0, {32}, Le(kHalf2) + FiveBits(q));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(t.data()[i], 2.0f * static_cast<float>(q[i] - 16)) << i;
  Tensor u = Dequantized(GgmlType::kQ5_1, {32}, Le(kHalf0_5) + Le(kHalf3) + FiveBits(q));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(u.data()[i], 0.5f * static_cast<float>(q[i]) + 3.0f) << i;
}

// The k-quants: 256 elements; ggml's layout puts element e = 128·n + 32·j + l (n < 2, j < 4,
// l < 32) in byte 32·n + l of the 2-bit fields at bits 2·j, and in the 4-bit fields (64
// elements to 32 bytes) in byte 32·(e / 64) + l, low nibble for even e / 32.

TEST(GgufFileTest, DequantizesQ2_K) {
  std::vector<int> q(256), scale(16), min(16);
  for (int e = 0; e < 256; ++e) q[e] = (e * 3 + e / 7) % 4;
  for (int s = 0; s < 16; ++s) scale[s] = (s * 5) % 16, min[s] = (s * 3 + 1) % 16;
  std::string scales(16, '\0'), qs(64, '\0');
  for (int s = 0; s < 16; ++s) scales[s] = static_cast<char>(scale[s] | min[s] << 4);
  for (int e = 0; e < 256; ++e)
    qs[32 * (e / 128) + e % 32] |= static_cast<char>(q[e] << (2 * ((e % 128) / 32)));
  Tensor t = Dequantized(GgmlType::kQ2_K, {256}, scales + qs + Le(kHalf1) + Le(kHalf0_5));
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(t.data()[e],
              static_cast<float>(scale[e / 16] * q[e]) - 0.5f * static_cast<float>(min[e / 16]))
        << e;
  }
}

TEST(GgufFileTest, DequantizesQ3_K) {
  // Values -4 ... 3: the low two bits of q + 4 (or of q) and a high bit set when q >= 0.
  std::vector<int> q(256), scale(16);
  for (int e = 0; e < 256; ++e) q[e] = (e * 5 + e / 9) % 8 - 4;
  for (int s = 0; s < 16; ++s) scale[s] = s * 4 - 32;  // -32 ... 28
  std::string hmask(32, '\0'), qs(64, '\0'), scales(12, '\0');
  for (int e = 0; e < 256; ++e) {
    const int low = q[e] >= 0 ? q[e] : q[e] + 4;
    qs[32 * (e / 128) + e % 32] |= static_cast<char>(low << (2 * ((e % 128) / 32)));
    if (q[e] >= 0) hmask[e % 32] |= static_cast<char>(1 << (e / 32));
  }
  // Scales are stored + 32 in six bits: the low four in bytes 0-7 (low nibbles for 0-7, high
  // for 8-15), the top two in byte 8 + s % 4 at bits 2·(s / 4).
  for (int s = 0; s < 16; ++s) {
    const int stored = scale[s] + 32;
    scales[s % 8] |= static_cast<char>((stored & 15) << (s < 8 ? 0 : 4));
    scales[8 + s % 4] |= static_cast<char>((stored >> 4) << (2 * (s / 4)));
  }
  Tensor t = Dequantized(GgmlType::kQ3_K, {256}, hmask + qs + scales + Le(kHalf0_5));
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(t.data()[e], 0.5f * static_cast<float>(scale[e / 16]) * static_cast<float>(q[e]))
        << e;
  }
}

// Q4_K and Q5_K's eight 6-bit scales and mins in 12 bytes: 0-3 in bytes 0-3 (scales) and 4-7
// (mins); 4-7's low four bits in bytes 8-11 (scale low nibble, min high) and their top two bits
// in the top bits of bytes 0-3 (scales) and 4-7 (mins).
std::string PackScalesMins(const std::vector<int>& scale, const std::vector<int>& min) {
  std::string bytes(12, '\0');
  for (int s = 0; s < 4; ++s) {
    bytes[s] = static_cast<char>(scale[s] | (scale[s + 4] >> 4) << 6);
    bytes[s + 4] = static_cast<char>(min[s] | (min[s + 4] >> 4) << 6);
    bytes[s + 8] = static_cast<char>((scale[s + 4] & 15) | (min[s + 4] & 15) << 4);
  }
  return bytes;
}

TEST(GgufFileTest, DequantizesQ4_KAndQ5_K) {
  std::vector<int> q(256), scale(8), min(8);
  for (int e = 0; e < 256; ++e) q[e] = (e * 11 + e / 5) % 32;
  for (int s = 0; s < 8; ++s) scale[s] = 63 - s * 7, min[s] = s * 9;
  std::string nibbles(128, '\0'), high(32, '\0');
  for (int e = 0; e < 256; ++e) {
    nibbles[32 * (e / 64) + e % 32] |= static_cast<char>((q[e] & 15) << (4 * ((e / 32) % 2)));
    high[e % 32] |= static_cast<char>((q[e] >> 4) << (e / 32));
  }
  const std::string head = Le(kHalf0_5) + Le(kHalf0_25) + PackScalesMins(scale, min);
  Tensor t4 = Dequantized(GgmlType::kQ4_K, {256}, head + nibbles);
  Tensor t5 = Dequantized(GgmlType::kQ5_K, {256}, head + high + nibbles);
  for (int e = 0; e < 256; ++e) {
    const float m = 0.25f * static_cast<float>(min[e / 32]);
    EXPECT_EQ(t4.data()[e], 0.5f * static_cast<float>(scale[e / 32] * (q[e] & 15)) - m) << e;
    EXPECT_EQ(t5.data()[e], 0.5f * static_cast<float>(scale[e / 32] * q[e]) - m) << e;
  }
}

TEST(GgufFileTest, DequantizesQ6_K) {
  // Values -32 ... 31 stored + 32: the low four bits in 128 bytes (each 128 elements take 64:
  // element r's in byte r % 64, low nibble for r < 64), the top two in 64 bytes (each 128
  // elements take 32: byte r % 32, bits 2·(r / 32)); 16 int8 scales.
  std::vector<int> q(256), scale(16);
  for (int e = 0; e < 256; ++e) q[e] = (e * 29 + e / 3) % 64 - 32;
  for (int s = 0; s < 16; ++s) scale[s] = s * 15 - 128;
  std::string ql(128, '\0'), qh(64, '\0'), scales(16, '\0');
  for (int e = 0; e < 256; ++e) {
    const int stored = q[e] + 32, n = e / 128, r = e % 128;
    ql[64 * n + r % 64] |= static_cast<char>((stored & 15) << (r < 64 ? 0 : 4));
    qh[32 * n + r % 32] |= static_cast<char>((stored >> 4) << (2 * (r / 32)));
  }
  for (int s = 0; s < 16; ++s) scales[s] = static_cast<char>(static_cast<int8_t>(scale[s]));
  Tensor t = Dequantized(GgmlType::kQ6_K, {256, 2},
                         ql + qh + scales + Le(kHalf0_25) + ql + qh + scales + Le(kHalf2));
  ASSERT_EQ(t.shape(), (Shape{2, 256}));
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(t.row(0)[e], 0.25f * static_cast<float>(scale[e / 16]) * static_cast<float>(q[e]))
        << e;
    EXPECT_EQ(t.row(1)[e], 2.0f * static_cast<float>(scale[e / 16]) * static_cast<float>(q[e]))
        << e;
  }
}

TEST(GgufFileTest, DescribesTypes) {
  EXPECT_EQ(GgmlTypeName(GgmlType::kQ4_K), "Q4_K");
  EXPECT_EQ(GgmlTypeName(GgmlType::kBF16), "BF16");
  EXPECT_EQ(GgmlTypeName(static_cast<GgmlType>(16)), "type 16");
  EXPECT_TRUE(IsQuantized(GgmlType::kQ8_0));
  EXPECT_FALSE(IsQuantized(GgmlType::kF16));
  EXPECT_FALSE(IsQuantized(static_cast<GgmlType>(16)));
  EXPECT_EQ(GgmlLayout(GgmlType::kQ3_K)->block_bytes, 110);
  std::vector<float> out(32);
  EXPECT_FALSE(DequantizeGgml(GgmlType::kQ8_0, std::vector<uint8_t>(33), out).ok());
  EXPECT_FALSE(
      DequantizeGgml(GgmlType::kQ8_0, std::vector<uint8_t>(34), std::span(out).first(16)).ok());
  EXPECT_TRUE(DequantizeGgml(GgmlType::kQ8_0, std::vector<uint8_t>(34), out).ok());
}

}  // namespace
}  // namespace attnserve
