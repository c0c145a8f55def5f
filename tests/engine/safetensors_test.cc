#include "engine/safetensors.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace attnserve {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  // Writes a file with the given header and `data_bytes` bytes of data (float 0, 1, 2, ...).
  std::string Write(const std::string& header, size_t data_bytes, const char* name = "t") {
    const std::string path = absl::StrCat(::testing::TempDir(), "/", name, ".safetensors");
    std::ofstream out(path, std::ios::binary);
    const uint64_t length = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
    out << header;
    for (size_t i = 0; i < data_bytes / 4; ++i) {
      const float value = static_cast<float>(i);
      out.write(reinterpret_cast<const char*>(&value), 4);
    }
    return path;
  }

  // Opening must fail with a message naming the file and containing `fragment`.
  void ExpectRefused(const std::string& path, const std::string& fragment) {
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << "accepted " << path;
    EXPECT_TRUE(absl::StrContains(file.status().message(), path)) << file.status();
    EXPECT_TRUE(absl::StrContains(file.status().message(), fragment)) << file.status();
  }
};

TEST_F(SafetensorsTest, ReadsTensorsAndMetadata) {
  const std::string path = Write(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("n":{"dtype":"I32","shape":[2],"data_offsets":[24,32]}})",
      32);
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  auto a = file->Float32("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->shape(), (Shape{2, 3}));
  EXPECT_EQ(a->row(1)[2], 5.0f);
  EXPECT_EQ(file->names(), (std::vector<std::string>{"a", "n"}));
  EXPECT_FALSE(file->Float32("n").ok());     // wrong dtype
  EXPECT_FALSE(file->Float32("nope").ok());  // missing
}

TEST_F(SafetensorsTest, WidensHalfAndBfloat16Exactly) {
  // F16: 1.5, -2, 65504 (the largest), 2^-24 (the smallest subnormal), 2^-14 - 2^-24 (the
  // largest subnormal), -0; BF16: 1.5, -2, 2^-133 (a float subnormal), 3.0e38 rounded.
  const std::vector<uint16_t> halves = {0x3E00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x8000};
  const std::vector<uint16_t> bf16s = {0x3FC0, 0xC000, 0x0001, 0x7F62};
  const std::string header =
      absl::StrCat(R"({"h":{"dtype":"F16","shape":[6],"data_offsets":[0,12]},)",
                   R"("b":{"dtype":"BF16","shape":[2,2],"data_offsets":[12,20]}})");
  const std::string path = absl::StrCat(::testing::TempDir(), "/half.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header.size() >> (8 * i)) & 0xff));
    out << header;
    for (uint16_t v : halves) out.write(reinterpret_cast<const char*>(&v), 2);
    for (uint16_t v : bf16s) out.write(reinterpret_cast<const char*>(&v), 2);
  }
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto h = file->Float32("h");
  ASSERT_TRUE(h.ok()) << h.status();
  const std::vector<float> expected_h = {
      1.5f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -14) - std::ldexp(1.0f, -24),
      -0.0f};
  for (size_t i = 0; i < expected_h.size(); ++i) EXPECT_EQ(h->data()[i], expected_h[i]) << i;
  EXPECT_TRUE(std::signbit(h->data()[5]));
  auto b = file->Float32("b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->shape(), (Shape{2, 2}));
  uint32_t bits = 0x7F620000;
  float big;
  std::memcpy(&big, &bits, sizeof(big));
  const std::vector<float> expected_b = {1.5f, -2.0f, std::ldexp(1.0f, -133), big};
  for (size_t i = 0; i < expected_b.size(); ++i) EXPECT_EQ(b->data()[i], expected_b[i]) << i;
}

TEST_F(SafetensorsTest, TensorOutlivesTheFileObject) {
  Tensor a;
  {
    auto file = SafetensorsFile::Open(
        Write(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16, "outlive"));
    ASSERT_TRUE(file.ok());
    a = *file->Float32("a");
  }
  EXPECT_EQ(a.data()[3], 3.0f);  // the file's bytes are kept alive by the tensor
}

// The weights are the process's own copy: truncating or rewriting the file under a loaded model
// changes nothing (a shared mapping would SIGBUS past the new end, or read the new bytes).
TEST_F(SafetensorsTest, TensorsDoNotChangeWhenTheFileDoes) {
  const std::string path =
      Write(R"({"a":{"dtype":"F32","shape":[4096],"data_offsets":[0,16384]}})", 16384, "changes");
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const Tensor a = *file->Float32("a");
  std::filesystem::resize_file(path, 8);
  EXPECT_EQ(a.data()[4095], 4095.0f);
  std::filesystem::resize_file(path, 0);
  std::ofstream(path, std::ios::binary) << std::string(1 << 16, '\xff');
  EXPECT_EQ(a.data()[0], 0.0f);
  EXPECT_EQ(a.data()[4095], 4095.0f);
}

// Pages of the data whose tensor nobody holds any more (a weight packed into another buffer) go
// back to the system; a second read of the same tensor shares the first one's lease.
TEST_F(SafetensorsTest, ReleasesTheWholePagesOfTensorsNobodyHolds) {
  const long page = sysconf(_SC_PAGESIZE);
  const int64_t floats = 16 * page / 4;
  std::string header = absl::StrCat(R"({"a":{"dtype":"F32","shape":[)", floats,
                                    R"(],"data_offsets":[0,)", floats * 4, "]}}");
  header.resize((header.size() + 7) / 8 * 8, ' ');  // aligned data, as writers pad it
  auto file = SafetensorsFile::Open(Write(header, floats * 4, "release"));
  ASSERT_TRUE(file.ok()) << file.status();
  auto resident_pages = [&](const float* data) {
    const uintptr_t first = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
    std::vector<unsigned char> pages(14);
    EXPECT_EQ(mincore(reinterpret_cast<void*>(first), 14 * page, pages.data()), 0);
    return std::count_if(pages.begin(), pages.end(), [](unsigned char p) { return p & 1; });
  };
  Tensor a = *file->Float32("a");
  const float* data = a.data();
  EXPECT_EQ(resident_pages(data), 14);
  {
    const Tensor again = *file->Float32("a");
    EXPECT_EQ(again.data(), data);
  }
  EXPECT_EQ(resident_pages(data), 14) << "the second view's end released the first one's pages";
  EXPECT_EQ(a.data()[floats - 1], static_cast<float>(floats - 1));
  a = Tensor();
  EXPECT_EQ(resident_pages(data), 0);
}

// Open reads the header only; each tensor's bytes are read when it is asked for, so a loader that
// drops each float weight once quantized never holds the whole file. A tensor whose views are all
// gone is read again, not handed back as the zeros its released pages now hold.
TEST_F(SafetensorsTest, ReadsEachTensorWhenAskedFor) {
  const long page = sysconf(_SC_PAGESIZE);
  const int64_t floats = 16 * page / 4;
  std::string header =
      absl::StrCat(R"({"a":{"dtype":"F32","shape":[)", floats, R"(],"data_offsets":[0,)",
                   floats * 4, R"(]},"b":{"dtype":)", R"("F32","shape":[)", floats,
                   R"(],"data_offsets":[)", floats * 4, ",", floats * 8, "]}}");
  header.resize((header.size() + 7) / 8 * 8, ' ');
  auto file = SafetensorsFile::Open(Write(header, floats * 8, "lazy"));
  ASSERT_TRUE(file.ok()) << file.status();
  const uint8_t* data = file->bytes().bytes.data() + 8 + header.size();
  auto resident_pages = [&](const uint8_t* begin) {
    const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
    std::vector<unsigned char> pages(14);
    EXPECT_EQ(mincore(reinterpret_cast<void*>(first), 14 * page, pages.data()), 0);
    return std::count_if(pages.begin(), pages.end(), [](unsigned char p) { return p & 1; });
  };
  EXPECT_EQ(resident_pages(data), 0);
  EXPECT_EQ(resident_pages(data + floats * 4), 0);
  Tensor a = *file->Float32("a");
  EXPECT_EQ(resident_pages(data), 14);
  EXPECT_EQ(resident_pages(data + floats * 4), 0);
  EXPECT_EQ(a.data()[floats - 1], static_cast<float>(floats - 1));
  a = Tensor();
  EXPECT_EQ(resident_pages(data), 0);
  a = *file->Float32("a");
  EXPECT_EQ(a.data()[floats - 1], static_cast<float>(floats - 1));
  const Tensor b = *file->Float32("b");
  EXPECT_EQ(b.data()[0], static_cast<float>(floats));
}

// A file rewritten between Open and the read of a tensor is refused naming the file and the
// tensor: a model is never assembled from two versions of its weights.
TEST_F(SafetensorsTest, RefusesAFileThatChangesWhileItLoads) {
  const std::string path =
      Write(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16, "rewritten");
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::ofstream(path, std::ios::app | std::ios::binary) << "more";
  auto a = file->Float32("a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.status().message(),
            absl::StrCat(path, ": tensor 'a': changed on disk while it was being loaded"));
}

TEST_F(SafetensorsTest, RefusesMalformedFiles) {
  ExpectRefused(Write("", 0, "empty"), "not a JSON object");
  {
    const std::string path = absl::StrCat(::testing::TempDir(), "/short.safetensors");
    std::ofstream(path) << "abc";
    ExpectRefused(path, "truncated");
  }
  // Header length claims more than the file holds.
  {
    const std::string path = absl::StrCat(::testing::TempDir(), "/claims.safetensors");
    std::ofstream out(path, std::ios::binary);
    const uint64_t length = 1000;
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << "{}";
    out.close();
    ExpectRefused(path, "truncated");
  }
  {
    const std::string path = absl::StrCat(::testing::TempDir(), "/huge.safetensors");
    std::ofstream out(path, std::ios::binary);
    const uint64_t length = uint64_t{1} << 40;
    out.write(reinterpret_cast<const char*>(&length), 8);
    out.close();
    ExpectRefused(path, "exceeds");
  }
  ExpectRefused(Write("{not json", 0, "json"), "not a JSON object");
  ExpectRefused(Write(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8, "range"),
                "'w'");
  ExpectRefused(Write(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16, "size"),
                "needs 12");
  ExpectRefused(Write(R"({"w":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", 16, "dtype"),
                "unknown dtype Q7");
  ExpectRefused(Write(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", 16, "neg"),
                "'w'");
  ExpectRefused(Write(R"({"w":{"dtype":"F32","shape":[4]}})", 16, "nooffsets"), "data_offsets");
  ExpectRefused(Write(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                      16, "overlap"),
                "overlap");
  ExpectRefused(Write(R"({"__metadata__":{"k":3}})", 0, "meta"), "__metadata__.k");
  auto missing = SafetensorsFile::Open("/nonexistent/model.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace attnserve
