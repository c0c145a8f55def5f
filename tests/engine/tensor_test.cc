#include "engine/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

namespace attnserve {
namespace {

Tensor Iota(Shape shape) {
  Tensor t(std::move(shape));
  std::iota(t.data(), t.data() + t.size(), 0.0f);
  return t;
}

TEST(TensorTest, StorageIsAlignedAndContiguous) {
  for (int64_t n : {1, 3, 17, 1000}) {
    Tensor t({n, 3});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % Tensor::kAlignment, 0u);
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.strides(), (Shape{3, 1}));
  }
}

TEST(TensorTest, ViewsShareStorage) {
  Tensor t = Iota({4, 5});
  Tensor columns = t.Slice(1, 2, 2);
  EXPECT_EQ(columns.shape(), (Shape{4, 2}));
  EXPECT_FALSE(columns.is_contiguous());
  EXPECT_EQ(columns.row(1)[0], 7.0f);
  columns.row(1)[0] = -1.0f;
  EXPECT_EQ(t.row(1)[2], -1.0f);

  Tensor second = t.Select(2);
  EXPECT_EQ(second.shape(), (Shape{5}));
  EXPECT_EQ(second.data(), t.row(2));
  EXPECT_EQ(t.Reshape({2, 10}).data(), t.data());
}

TEST(TensorTest, CloneCopiesStridedViewsDensely) {
  Tensor t = Iota({3, 4});
  Tensor copy = t.Slice(1, 1, 2).Clone();
  EXPECT_TRUE(copy.is_contiguous());
  EXPECT_NE(copy.data(), t.data());
  const float expected[] = {1, 2, 5, 6, 9, 10};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(copy.data()[i], expected[i]);
}

TEST(TensorTest, FlattenRowsIsAViewWhenLeadingAxesNest) {
  Tensor t = Iota({2, 3, 8});
  Tensor columns = t.Slice(2, 4, 4);  // rows of 4 with stride 8: still nests
  Tensor rows = columns.FlattenRows();
  EXPECT_EQ(rows.shape(), (Shape{6, 4}));
  EXPECT_EQ(rows.strides(), (Shape{8, 1}));
  EXPECT_EQ(rows.data(), columns.data());
  EXPECT_EQ(rows.row(5)[3], 5 * 8 + 4 + 3);

  Tensor gap = t.Slice(1, 0, 2);  // batch stride 24 but only 2 rows of 8 used: needs a copy
  Tensor copied = gap.FlattenRows();
  EXPECT_EQ(copied.shape(), (Shape{4, 8}));
  EXPECT_EQ(copied.row(2)[0], 24.0f);
}

TEST(TensorTest, StackedViewOnlyOverAdjacentParts) {
  Tensor t = Iota({6, 4});
  const Tensor a = t.Slice(0, 0, 2), b = t.Slice(0, 2, 3), c = t.Slice(0, 5, 1);
  Tensor stacked = Tensor::StackedView({&a, &b, &c});
  EXPECT_EQ(stacked.shape(), (Shape{6, 4}));
  EXPECT_EQ(stacked.data(), t.data());
  EXPECT_TRUE(Tensor::StackedView({&a, &c}).empty());  // a gap between them
  EXPECT_TRUE(Tensor::StackedView({&b, &a}).empty());  // out of order
  const Tensor other = Iota({2, 4});
  EXPECT_TRUE(Tensor::StackedView({&other, &b}).empty());
  const Tensor narrow = t.Slice(0, 2, 1).Slice(1, 0, 3);
  EXPECT_TRUE(Tensor::StackedView({&a, &narrow}).empty());
}

// Parts with owners of their own (one lease per tensor of a weights file) stay alive as long as
// the view does.
TEST(TensorTest, StackedViewKeepsEveryPartsOwner) {
  auto memory = std::make_shared<std::vector<float>>(8, 1.0f);
  std::weak_ptr<std::vector<float>> first_owner, second_owner;
  Tensor stacked;
  {
    auto first = std::make_shared<std::vector<float>>();  // stand-ins for two leases
    auto second = std::make_shared<std::vector<float>>();
    first_owner = first;
    second_owner = second;
    const Tensor a = Tensor::Wrap(memory->data(), {1, 4}, first);
    const Tensor b = Tensor::Wrap(memory->data() + 4, {1, 4}, second);
    stacked = Tensor::StackedView({&a, &b});
  }
  EXPECT_EQ(stacked.shape(), (Shape{2, 4}));
  EXPECT_FALSE(first_owner.expired());
  EXPECT_FALSE(second_owner.expired());
  stacked = Tensor();
  EXPECT_TRUE(second_owner.expired());
}

TEST(TensorTest, FillOnStridedViewTouchesOnlyTheView) {
  Tensor t = Tensor::Zeros({2, 4});
  Tensor view = t.Slice(1, 1, 2);
  view.Fill(3.0f);
  const float expected[] = {0, 3, 3, 0, 0, 3, 3, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(t.data()[i], expected[i]);
}

}  // namespace
}  // namespace attnserve
