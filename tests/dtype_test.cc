// Element types, shape printing and the checked element count.
#include "kernels/dtype.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(ElementSize(DType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(DType::kFloat64), 8u);
  EXPECT_EQ(DTypeName(DType::kFloat32), "float32");
  EXPECT_EQ(DTypeName(DType::kFloat64), "float64");
}

TEST(ShapeToStringTest, PrintsLikePython) {
  EXPECT_EQ(ShapeToString({}), "()");
  EXPECT_EQ(ShapeToString({3}), "(3,)");
  EXPECT_EQ(ShapeToString({2, 3}), "(2, 3)");
  EXPECT_EQ(ShapeToString({100, 4000, 5}), "(100, 4000, 5)");
}

TEST(CheckedElementCountTest, MultipliesExtents) {
  absl::StatusOr<int64_t> scalar = CheckedElementCount({}, kNoLimit, "x");
  ASSERT_TRUE(scalar.ok()) << scalar.status().message();
  EXPECT_EQ(*scalar, 1);
  absl::StatusOr<int64_t> seed = CheckedElementCount({100, 4000, 5}, kNoLimit, "x");
  ASSERT_TRUE(seed.ok()) << seed.status().message();
  EXPECT_EQ(*seed, 2000000);
  absl::StatusOr<int64_t> empty = CheckedElementCount({0, int64_t{1} << 62, 8}, kNoLimit, "x");
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(*empty, 0);
  absl::StatusOr<int64_t> rank8 = CheckedElementCount(Shape(8, 2), kNoLimit, "x");
  ASSERT_TRUE(rank8.ok()) << rank8.status().message();
  EXPECT_EQ(*rank8, 256);
}

TEST(CheckedElementCountTest, AtTheLimitIsAllowed) {
  absl::StatusOr<int64_t> count = CheckedElementCount({10, 10}, 100, "x");
  ASSERT_TRUE(count.ok()) << count.status().message();
  EXPECT_EQ(*count, 100);
}

TEST(CheckedElementCountTest, NegativeExtentNamesFieldAndAxis) {
  absl::StatusOr<int64_t> count = CheckedElementCount({3, -2}, kNoLimit, "values");
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(count.status().message()), HasSubstr("values.shape[1] is -2"));
}

TEST(CheckedElementCountTest, RankNineIsRejected) {
  absl::StatusOr<int64_t> count = CheckedElementCount(Shape(9, 1), kNoLimit, "factors");
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(count.status().message()), HasSubstr("factors.shape has rank 9"));
}

TEST(CheckedElementCountTest, OverflowIsRejectedNotWrapped) {
  const int64_t big = int64_t{1} << 40;
  absl::StatusOr<int64_t> count = CheckedElementCount({big, big}, kNoLimit, "y");
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(count.status().message()), HasSubstr("y.shape (1099511627776, "));

  absl::StatusOr<int64_t> many_axes = CheckedElementCount(Shape(8, 1 << 10), kNoLimit, "y");
  EXPECT_EQ(many_axes.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckedElementCountTest, OverTheLimitNamesTheLimit) {
  absl::StatusOr<int64_t> count = CheckedElementCount({10, 11}, 100, "input");
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(count.status().message()), HasSubstr("more than 100 elements"));
}

}  // namespace
}  // namespace gpucompute
