// PageWarmer reads every page of its memory once per pass, in bounded steps.
#include "engine/page_warmer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "engine/architectures/model.h"

namespace attnserve {
namespace {

FileBytes Buffer(size_t bytes) {
  auto storage = std::make_shared<std::vector<uint8_t>>(bytes, 1);
  return {{storage->data(), storage->size()}, storage};
}

TEST(PageWarmerTest, StepsThroughEveryPageOncePerPass) {
  // Ten whole pages and a partial one.
  PageWarmer warmer(Buffer(10 * PageWarmer::kPageBytes + 100));
  EXPECT_EQ(warmer.page_count(), 11);
  EXPECT_EQ(warmer.Step(4), 4);
  EXPECT_EQ(warmer.Step(4), 4);
  EXPECT_EQ(warmer.Step(4), 3);
  EXPECT_EQ(warmer.Step(4), 0);  // the pass is complete until restarted
  warmer.Restart();
  EXPECT_EQ(warmer.Step(100), 11);
  EXPECT_EQ(warmer.Step(100), 0);
}

TEST(PageWarmerTest, EmptyMemoryHasNothingToRead) {
  PageWarmer warmer(FileBytes{});
  EXPECT_EQ(warmer.page_count(), 0);
  EXPECT_EQ(warmer.Step(8), 0);
}

TEST(PageWarmerTest, LoadedModelsExposeTheirWholeWeightFile) {
  const std::string demo = ATTNSERVE_SOURCE_DIR "/models/demo";
  auto model = LoadModel(demo);
  ASSERT_TRUE(model.ok()) << model.status();
  const FileBytes& file = (*model)->weight_file;
  EXPECT_EQ(file.bytes.size(), std::filesystem::file_size(demo + "/model.safetensors"));
  PageWarmer warmer(file);
  EXPECT_EQ(warmer.Step(1 << 20), warmer.page_count());
}

}  // namespace
}  // namespace attnserve
