// ProgressBar: silent when disabled or for short transfers, otherwise a line
// redrawn in place that ends at 100% and a newline.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "client/progress_bar.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute::client {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Captures what a ProgressBar writes.
class ProgressBarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = open_memstream(&buffer_, &size_);
    ASSERT_NE(out_, nullptr);
  }
  void TearDown() override {
    if (out_ != nullptr) std::fclose(out_);
    std::free(buffer_);
  }

  std::string Written() {
    std::fflush(out_);
    return std::string(buffer_, size_);
  }

  FILE* out_ = nullptr;
  char* buffer_ = nullptr;
  size_t size_ = 0;
};

TEST_F(ProgressBarTest, DisabledWritesNothing) {
  {
    ProgressBar bar("upload", /*enabled=*/false, out_);
    absl::SleepFor(absl::Milliseconds(600));
    bar.Update(50, 100);
    bar.Update(100, 100);
  }
  EXPECT_EQ(Written(), "");
}

TEST_F(ProgressBarTest, ShortTransferWritesNothing) {
  {
    ProgressBar bar("upload", /*enabled=*/true, out_);
    bar.Callback()(0, 100);
    bar.Callback()(100, 100);
  }
  EXPECT_EQ(Written(), "");
}

TEST_F(ProgressBarTest, LongTransferDrawsAndEndsTheLine) {
  {
    ProgressBar bar("download x", /*enabled=*/true, out_);
    absl::SleepFor(absl::Milliseconds(600));
    bar.Update(512 << 10, 1 << 20);
    bar.Update(1 << 20, 1 << 20);
  }
  const std::string written = Written();
  EXPECT_THAT(written, StartsWith("\rdownload x ["));
  EXPECT_THAT(written, HasSubstr(" 50% 512.0 KiB / 1.0 MiB"));
  EXPECT_THAT(written, HasSubstr("100% 1.0 MiB / 1.0 MiB"));
  EXPECT_THAT(written, EndsWith("\n"));
}

}  // namespace
}  // namespace gpucompute::client
