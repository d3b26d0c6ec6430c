// Shape rules shared by the server's validation and every backend.
#include "kernels/shape_rules.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

struct BroadcastCase {
  Shape a;
  Shape b;
  Shape expected;
};

TEST(BroadcastShapesTest, FollowsNumPy) {
  const std::vector<BroadcastCase> cases = {
      {{}, {}, {}},
      {{}, {3}, {3}},
      {{2, 3}, {}, {2, 3}},
      {{4000, 5}, {100, 4000, 5}, {100, 4000, 5}},
      {{3, 1}, {1, 4}, {3, 4}},
      {{1}, {0}, {0}},
      {{5, 1, 7}, {3, 1}, {5, 3, 7}},
      {{2, 1, 3, 1, 2, 1, 2, 1}, {1, 3, 1, 2, 1, 2, 1, 3}, {2, 3, 3, 2, 2, 2, 2, 3}},
      {{1, 1, 1, 1, 1, 1, 1, 1}, {7}, {1, 1, 1, 1, 1, 1, 1, 7}},
  };
  for (const BroadcastCase& c : cases) {
    SCOPED_TRACE(ShapeToString(c.a) + " with " + ShapeToString(c.b));
    absl::StatusOr<Shape> forward = BroadcastShapes(c.a, c.b, "a", "b");
    ASSERT_TRUE(forward.ok()) << forward.status().message();
    EXPECT_EQ(*forward, c.expected);
    absl::StatusOr<Shape> backward = BroadcastShapes(c.b, c.a, "b", "a");
    ASSERT_TRUE(backward.ok()) << backward.status().message();
    EXPECT_EQ(*backward, c.expected);
  }
}

TEST(BroadcastShapesTest, MismatchNamesBothOperandsAndTheAxis) {
  absl::StatusOr<Shape> shape = BroadcastShapes({2, 3}, {4, 2, 4}, "factors", "values");
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(shape.status().message());
  EXPECT_THAT(message, HasSubstr("factors.shape (2, 3)"));
  EXPECT_THAT(message, HasSubstr("values.shape (4, 2, 4)"));
  EXPECT_THAT(message, HasSubstr("axis -1 has extents 3 and 4"));
}

TEST(BroadcastShapesTest, ZeroDoesNotBroadcastAgainstTwo) {
  absl::StatusOr<Shape> shape = BroadcastShapes({0}, {2}, "a", "b");
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BroadcastShapesTest, RankOverEightIsRejected) {
  absl::StatusOr<Shape> shape = BroadcastShapes(Shape(9, 1), {1}, "a", "b");
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shape.status().message()), HasSubstr("rank 9"));
}

TEST(BroadcastStridesTest, ZeroOnBroadcastAxes) {
  EXPECT_THAT(BroadcastStrides({4000, 5}, {100, 4000, 5}), ElementsAre(0, 5, 1));
  EXPECT_THAT(BroadcastStrides({100, 4000, 5}, {100, 4000, 5}), ElementsAre(20000, 5, 1));
  EXPECT_THAT(BroadcastStrides({3, 1}, {3, 4}), ElementsAre(1, 0));
  EXPECT_THAT(BroadcastStrides({1, 4}, {3, 4}), ElementsAre(0, 1));
  EXPECT_THAT(BroadcastStrides({}, {2, 3}), ElementsAre(0, 0));
  EXPECT_THAT(BroadcastStrides({}, {}), ElementsAre());
  EXPECT_THAT(BroadcastStrides({2, 1, 3}, {5, 2, 4, 3}), ElementsAre(0, 3, 0, 1));
}

TEST(BroadcastStridesTest, AddressesEveryElementOfAFullOperand) {
  const Shape shape = {2, 3, 4, 5, 1, 2, 3, 2};
  const std::vector<int64_t> strides = BroadcastStrides(shape, shape);
  std::vector<int64_t> expected(shape.size());
  int64_t stride = 1;
  for (size_t axis = shape.size(); axis-- > 0;) {
    expected[axis] = shape[axis] == 1 ? 0 : stride;
    stride *= shape[axis];
  }
  EXPECT_THAT(strides, ElementsAreArray(expected));
}

TEST(CheckNormalizeShapeTest, NeedsNonEmptyRows) {
  EXPECT_TRUE(CheckNormalizeShape({7}, "input").ok());
  EXPECT_TRUE(CheckNormalizeShape({0, 7}, "input").ok());
  absl::Status scalar = CheckNormalizeShape({}, "input");
  EXPECT_EQ(scalar.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(scalar.message()), HasSubstr("input is a scalar"));
  absl::Status empty = CheckNormalizeShape({3, 0}, "input");
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.message()), HasSubstr("input.shape (3, 0)"));
}

TEST(LombScargleShapesTest, AcceptsEveryLayout) {
  absl::StatusOr<LombScargleShape> single = LombScargleShapes({100}, {100}, nullptr, 50);
  ASSERT_TRUE(single.ok()) << single.status().message();
  EXPECT_EQ(single->batch, 1);
  EXPECT_EQ(single->samples, 100);
  EXPECT_EQ(single->frequencies, 50);
  EXPECT_FALSE(single->x_batched);
  EXPECT_FALSE(single->weights_batched);
  EXPECT_EQ(single->out, Shape({50}));

  const Shape shared_weights = {100};
  absl::StatusOr<LombScargleShape> shared_x =
      LombScargleShapes({100}, {4, 100}, &shared_weights, 50);
  ASSERT_TRUE(shared_x.ok()) << shared_x.status().message();
  EXPECT_EQ(shared_x->batch, 4);
  EXPECT_FALSE(shared_x->x_batched);
  EXPECT_FALSE(shared_x->weights_batched);
  EXPECT_EQ(shared_x->out, Shape({4, 50}));

  const Shape batched_weights = {4, 100};
  absl::StatusOr<LombScargleShape> batched =
      LombScargleShapes({4, 100}, {4, 100}, &batched_weights, 1);
  ASSERT_TRUE(batched.ok()) << batched.status().message();
  EXPECT_TRUE(batched->x_batched);
  EXPECT_TRUE(batched->weights_batched);
  EXPECT_EQ(batched->out, Shape({4, 1}));
}

struct LombScargleErrorCase {
  Shape x;
  Shape y;
  std::vector<Shape> weights;  // empty or one shape
  int64_t frequencies;
  const char* expected;
};

TEST(LombScargleShapesTest, RejectsWithTheOffendingOperand) {
  const std::vector<LombScargleErrorCase> cases = {
      {{}, {5}, {}, 3, "x.shape () must be (N) or (B, N)"},
      {{5}, {2, 2, 5}, {}, 3, "y.shape (2, 2, 5) must be (N) or (B, N)"},
      {{4}, {5}, {}, 3, "x.shape (4,) and y.shape (5,) differ"},
      {{2, 5}, {5}, {}, 3, "x.shape (2, 5) is batched but y.shape (5,)"},
      {{2, 5}, {3, 5}, {}, 3, "x.shape (2, 5) is batched but y.shape (3, 5)"},
      {{5}, {5}, {{4}}, 3, "weights.shape (4,) must equal y.shape (5,)"},
      {{5}, {5}, {{1, 5}}, 3, "weights.shape (1, 5)"},
      {{5}, {2, 5}, {{3, 5}}, 3, "weights.shape (3, 5)"},
      {{0}, {0}, {}, 3, "y.shape (0,) is empty"},
      {{5}, {0, 5}, {}, 3, "y.shape (0, 5) is empty"},
      {{5}, {5}, {}, 0, "frequencies are empty"},
      {{5}, {5}, {}, -2, "frequencies are empty"},
  };
  for (const LombScargleErrorCase& c : cases) {
    SCOPED_TRACE(c.expected);
    const Shape* weights = c.weights.empty() ? nullptr : &c.weights[0];
    absl::StatusOr<LombScargleShape> shape = LombScargleShapes(c.x, c.y, weights, c.frequencies);
    ASSERT_FALSE(shape.ok());
    EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(shape.status().message()), HasSubstr(c.expected));
  }
}

}  // namespace
}  // namespace gpucompute
