// The argument parsers and report helpers behind gpucompute-cli.
#include <string>
#include <vector>

#include "client/bench.h"
#include "client/cli_parse.h"
#include "client/format.h"
#include "client/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class CliParseTest : public ::testing::Test {
 protected:
  template <typename T>
  static void ExpectInvalid(const absl::StatusOr<T>& parsed, const std::string& part) {
    ASSERT_FALSE(parsed.ok()) << "accepted input that should fail with: " << part;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr(part));
  }
};

TEST_F(CliParseTest, Linspace) {
  absl::StatusOr<Linspace> linspace = ParseLinspace("-90:90.5:181", "lat");
  ASSERT_TRUE(linspace.ok()) << linspace.status().message();
  EXPECT_EQ(linspace->start, -90);
  EXPECT_EQ(linspace->stop, 90.5);
  EXPECT_EQ(linspace->count, 181u);

  ExpectInvalid(ParseLinspace("0:1", "lat"), "--lat='0:1': expected START:STOP:COUNT");
  ExpectInvalid(ParseLinspace("0:x:3", "lon"), "--lon STOP: 'x' is not a finite number");
  ExpectInvalid(ParseLinspace("0:nan:3", "lon"), "not a finite number");
  ExpectInvalid(ParseLinspace("0:1:0", "freq_grid"), "not a positive integer");
  ExpectInvalid(ParseLinspace("0:1:-4", "freq_grid"), "not a positive integer");
  ExpectInvalid(ParseLinspace("0:1:2.5", "freq_grid"), "not a positive integer");
}

TEST_F(CliParseTest, GeoPoints) {
  absl::StatusOr<std::vector<v1::GeoPoint>> points =
      ParseGeoPoints("48.85,2.35; -33.9,151.2;", "ref");
  ASSERT_TRUE(points.ok()) << points.status().message();
  ASSERT_EQ(points->size(), 2u);
  EXPECT_EQ((*points)[0].lat(), 48.85);
  EXPECT_EQ((*points)[0].lon(), 2.35);
  EXPECT_EQ((*points)[1].lat(), -33.9);
  EXPECT_EQ((*points)[1].lon(), 151.2);

  ExpectInvalid(ParseGeoPoints("48.85", "ref"), "'48.85' is not LAT,LON");
  ExpectInvalid(ParseGeoPoints("91,0", "ref"), "latitude 91 is outside [-90, 90]");
  ExpectInvalid(ParseGeoPoints("0,inf", "ref"), "--ref LON");
  ExpectInvalid(ParseGeoPoints("", "ref"), "no LAT,LON points");
}

TEST_F(CliParseTest, Norm) {
  EXPECT_EQ(*ParseNorm("sum"), v1::NORM_SUM);
  EXPECT_EQ(*ParseNorm("L1"), v1::NORM_L1);
  EXPECT_EQ(*ParseNorm("l2"), v1::NORM_L2);
  EXPECT_EQ(*ParseNorm("max_abs"), v1::NORM_MAX_ABS);
  ExpectInvalid(ParseNorm("linf"), "expected sum, l1, l2 or max_abs");
}

TEST_F(CliParseTest, LombScargleNormalizationAndMethod) {
  EXPECT_EQ(*ParseLombScargleNormalization("power"), v1::LOMB_SCARGLE_NORMALIZATION_POWER);
  EXPECT_EQ(*ParseLombScargleNormalization("Normalize"), v1::LOMB_SCARGLE_NORMALIZATION_NORMALIZE);
  EXPECT_EQ(*ParseLombScargleNormalization("amplitude"), v1::LOMB_SCARGLE_NORMALIZATION_AMPLITUDE);
  ExpectInvalid(ParseLombScargleNormalization("psd"), "expected power, normalize or amplitude");
  EXPECT_EQ(*ParseLombScargleMethod("auto"), v1::LOMB_SCARGLE_METHOD_AUTO);
  EXPECT_EQ(*ParseLombScargleMethod("direct"), v1::LOMB_SCARGLE_METHOD_DIRECT);
  EXPECT_EQ(*ParseLombScargleMethod("NUFFT"), v1::LOMB_SCARGLE_METHOD_NUFFT);
  ExpectInvalid(ParseLombScargleMethod("fast"), "expected auto, direct or nufft");
}

TEST_F(CliParseTest, OperandSpec) {
  absl::StatusOr<OperandSpec> buffer = ParseOperandSpec("buffer:0123abcd", "values");
  ASSERT_TRUE(buffer.ok()) << buffer.status().message();
  EXPECT_EQ(buffer->kind, OperandSpec::Kind::kBuffer);
  EXPECT_EQ(buffer->value, "0123abcd");
  absl::StatusOr<OperandSpec> file = ParseOperandSpec("data/buffer.npy", "values");
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->kind, OperandSpec::Kind::kFile);
  EXPECT_EQ(file->value, "data/buffer.npy");
  ExpectInvalid(ParseOperandSpec("buffer:", "values"), "needs a buffer id");
  ExpectInvalid(ParseOperandSpec("", "values"), "--values is empty");
}

TEST_F(CliParseTest, Mix) {
  absl::StatusOr<std::vector<MixEntry>> mix = ParseMix("normalize:3, haversine,discount:0");
  ASSERT_TRUE(mix.ok()) << mix.status().message();
  ASSERT_EQ(mix->size(), 2u) << "weight 0 should drop discount";
  EXPECT_EQ((*mix)[0].op, BenchOp::kNormalize);
  EXPECT_EQ((*mix)[0].weight, 3u);
  EXPECT_EQ((*mix)[1].op, BenchOp::kHaversine);
  EXPECT_EQ((*mix)[1].weight, 1u);

  ExpectInvalid(ParseMix("fft:1"), "unknown operation 'fft'");
  ExpectInvalid(ParseMix("normalize:-1"), "not a non-negative integer");
  ExpectInvalid(ParseMix("normalize:1,normalize:2"), "listed twice");
  ExpectInvalid(ParseMix("lombscargle:0"), "no operation with a weight above 0");
}

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_EQ(*ParseDTypeName("float32"), v1::FLOAT32);
  EXPECT_EQ(*ParseDTypeName("F8"), v1::FLOAT64);
  EXPECT_FALSE(ParseDTypeName("int32").ok());
  EXPECT_EQ(DTypeSize(v1::FLOAT32), 4u);
  EXPECT_EQ(DTypeSize(v1::DTYPE_UNSPECIFIED), 0u);
  EXPECT_EQ(ShapeToString(std::vector<int64_t>{}), "()");
  EXPECT_EQ(ShapeToString(std::vector<int64_t>{3}), "(3,)");
  EXPECT_EQ(ShapeToString(std::vector<int64_t>{2, 0, 4}), "(2, 0, 4)");
}

TEST(ByteCountTest, ChecksExtentsAndOverflow) {
  EXPECT_EQ(*ByteCount(v1::FLOAT64, std::vector<int64_t>{}), 8u);
  EXPECT_EQ(*ByteCount(v1::FLOAT32, std::vector<int64_t>{2, 3}), 24u);
  EXPECT_EQ(*ByteCount(v1::FLOAT32, std::vector<int64_t>{int64_t{1} << 62, 0}), 0u);
  EXPECT_FALSE(ByteCount(v1::FLOAT32, std::vector<int64_t>{-1}).ok());
  EXPECT_FALSE(
      ByteCount(v1::FLOAT64, std::vector<int64_t>{int64_t{1} << 31, int64_t{1} << 31}).ok());
  EXPECT_FALSE(ByteCount(v1::DTYPE_UNSPECIFIED, std::vector<int64_t>{1}).ok());
}

TEST(MakeTensorTest, TypedValuesAndSizeCheck) {
  const std::vector<double> values = {1.5, -2.0};
  absl::StatusOr<v1::Tensor> tensor = MakeTensor(values, std::vector<int64_t>{2});
  ASSERT_TRUE(tensor.ok()) << tensor.status().message();
  EXPECT_EQ(tensor->dtype(), v1::FLOAT64);
  EXPECT_THAT(*DecodeAsDoubles(tensor->dtype(), tensor->data()), ElementsAre(1.5, -2.0));
  absl::StatusOr<v1::Tensor> wrong = MakeTensor(values, std::vector<int64_t>{3});
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("float64 (3,) needs 24 bytes, got 16"));
}

TEST(FormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(uint64_t{8} << 20), "8.0 MiB");
}

TEST(FormatTest, TrailerShowsEveryTiming) {
  v1::ResultTrailer trailer;
  trailer.set_backend("cuda");
  trailer.set_device("cuda:0 (NVIDIA H100)");
  v1::Timing& timing = *trailer.mutable_timing();
  timing.set_queue_us(1);
  timing.set_transfer_in_us(2);
  timing.set_compute_us(3);
  timing.set_transfer_out_us(4);
  timing.set_total_us(10);
  EXPECT_EQ(FormatTrailer(trailer),
            "backend     cuda on cuda:0 (NVIDIA H100)\n"
            "timing (us) queue 1, transfer in 2, compute 3, transfer out 4, stream write 0, "
            "prepare 0, other 0; total 10\n");
  // The stages add up to the total: what they leave is named, and so is an overlap.
  timing.set_stream_write_us(3);
  timing.set_prepare_us(1);
  timing.set_total_us(20);
  EXPECT_THAT(FormatTrailer(trailer), ::testing::HasSubstr("stream write 3, prepare 1, other 6; total 20"));
  timing.set_total_us(12);
  EXPECT_THAT(FormatTrailer(trailer), ::testing::HasSubstr("prepare 1, overlapped 2; total 12"));
  trailer.set_method("nufft");
  EXPECT_THAT(FormatTrailer(trailer),
              ::testing::StartsWith("backend     cuda on cuda:0 (NVIDIA H100), method nufft\n"));
}

TEST(FormatTest, PreviewTruncates) {
  Result result;
  result.header.set_dtype(v1::FLOAT32);
  const std::vector<float> values = {0.5f, 1, 2, 3};
  result.data = HostBytes::CopyOf({reinterpret_cast<const char*>(values.data()), 16});
  EXPECT_EQ(FormatPreview(result, 2), "[0.5, 1, ...]");
  EXPECT_EQ(FormatPreview(result, 4), "[0.5, 1, 2, 3]");
}

TEST(BenchSummaryTest, NearestRankPercentiles) {
  std::vector<absl::Duration> latencies;
  for (int ms = 100; ms >= 1; --ms) latencies.push_back(absl::Milliseconds(ms));
  const LatencySummary summary = Summarize(latencies);
  EXPECT_EQ(summary.count, 100u);
  EXPECT_EQ(summary.p50, absl::Milliseconds(50));
  EXPECT_EQ(summary.p90, absl::Milliseconds(90));
  EXPECT_EQ(summary.p99, absl::Milliseconds(99));
  EXPECT_EQ(summary.max, absl::Milliseconds(100));

  std::vector<absl::Duration> one = {absl::Milliseconds(7)};
  EXPECT_EQ(Summarize(one).p50, absl::Milliseconds(7));
  std::vector<absl::Duration> none;
  EXPECT_EQ(Summarize(none).count, 0u);
}

}  // namespace
}  // namespace gpucompute::client
