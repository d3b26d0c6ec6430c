// ResultAssembler: reassembly of result streams and every framing violation.
#include <string>
#include <utility>
#include <vector>

#include "client/result.h"
#include "gmock/gmock.h"
#include "gpucompute/v1/bulk_wire.h"
#include "gtest/gtest.h"

namespace gpucompute::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::ResultChunk Header(v1::DType dtype, std::vector<int64_t> shape, uint64_t total_bytes) {
  v1::ResultChunk chunk;
  chunk.mutable_header()->set_dtype(dtype);
  chunk.mutable_header()->mutable_shape()->Add(shape.begin(), shape.end());
  chunk.mutable_header()->set_total_bytes(total_bytes);
  return chunk;
}

v1::ResultChunk Data(uint64_t offset, std::string bytes) {
  v1::ResultChunk chunk;
  chunk.mutable_data()->set_offset(offset);
  chunk.mutable_data()->set_data(std::move(bytes));
  return chunk;
}

v1::ResultChunk Trailer(bool with_stored_buffer = false) {
  v1::ResultChunk chunk;
  chunk.mutable_trailer()->set_backend("cpu");
  chunk.mutable_trailer()->set_device("cpu");
  chunk.mutable_trailer()->mutable_timing()->set_compute_us(42);
  if (with_stored_buffer) chunk.mutable_trailer()->mutable_stored_buffer()->set_id("abc");
  return chunk;
}

// Header, data and trailer in one ResultChunk.complete.
v1::ResultChunk Complete(const v1::ResultChunk& header, std::string bytes,
                         const v1::ResultChunk& trailer) {
  v1::ResultChunk chunk;
  *chunk.mutable_complete()->mutable_header() = header.header();
  chunk.mutable_complete()->set_data(std::move(bytes));
  *chunk.mutable_complete()->mutable_trailer() = trailer.trailer();
  return chunk;
}

std::string DoubleBytes(std::vector<double> values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
}

class ResultAssemblerTest : public ::testing::Test {
 protected:
  // Feeds `chunks` in order; returns the first error or the result.
  absl::StatusOr<Result> Assemble(const std::vector<v1::ResultChunk>& chunks,
                                  bool expect_data = true, uint64_t max_result_bytes = 1 << 20) {
    ResultAssembler assembler({.expect_data = expect_data,
                               .max_result_bytes = max_result_bytes,
                               .progress = [this](uint64_t done, uint64_t total) {
                                 progress_.emplace_back(done, total);
                               }});
    for (const v1::ResultChunk& chunk : chunks) {
      if (absl::Status status = assembler.Add(chunk); !status.ok()) return status;
    }
    return std::move(assembler).Finish();
  }

  static void ExpectDataLoss(const absl::StatusOr<Result>& result, const std::string& part) {
    ASSERT_FALSE(result.ok()) << "accepted a stream that should fail with: " << part;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status().message();
    EXPECT_THAT(result.status().message(), HasSubstr(part));
  }

  std::vector<std::pair<uint64_t, uint64_t>> progress_;
};

TEST_F(ResultAssemblerTest, ReassemblesChunksInOrder) {
  const std::string bytes = DoubleBytes({1.0, 2.5, -3.0, 4.0, 5.0, 6.0});
  absl::StatusOr<Result> result =
      Assemble({Header(v1::FLOAT64, {2, 3}, 48), Data(0, bytes.substr(0, 16)),
                Data(16, bytes.substr(16, 24)), Data(40, bytes.substr(40)), Trailer()});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->data, bytes);
  EXPECT_THAT(result->header.shape(), ElementsAre(2, 3));
  EXPECT_EQ(result->trailer.timing().compute_us(), 42u);
  absl::StatusOr<std::vector<double>> values = result->AsDoubles();
  ASSERT_TRUE(values.ok()) << values.status().message();
  EXPECT_THAT(*values, ElementsAre(1.0, 2.5, -3.0, 4.0, 5.0, 6.0));
  EXPECT_THAT(
      progress_,
      ElementsAre(std::pair<uint64_t, uint64_t>{0, 48}, std::pair<uint64_t, uint64_t>{16, 48},
                  std::pair<uint64_t, uint64_t>{40, 48}, std::pair<uint64_t, uint64_t>{48, 48}));
}

// Received messages of a large result (the data copied into place beside the reading
// thread, PayloadCopier): byte-exact once the trailer is in; a framing error half way
// still fails, with the copies queued so far finished before the memory goes.
TEST_F(ResultAssemblerTest, LargeResultsFromReceivedMessagesAreByteExact) {
  const uint64_t total = ResultAssembler::kCopyBesideFromBytes + (3 << 20) + 8;
  std::string bytes(total, '\0');
  for (uint64_t i = 0; i < total; ++i) bytes[i] = static_cast<char>(i * 2654435761u >> 13);
  const uint64_t chunk = 1 << 20;
  const auto serialized = [](const v1::ResultChunk& message) {
    return v1::wire::SerializedMessage(message);
  };
  for (const bool broken : {false, true}) {
    ResultAssembler assembler({.max_result_bytes = total});
    ASSERT_TRUE(assembler.AddBytes(serialized(Header(v1::FLOAT64, {int64_t(total / 8)}, total))).ok());
    absl::Status status;
    for (uint64_t offset = 0; offset < total && status.ok(); offset += chunk) {
      const uint64_t n = std::min(chunk, total - offset);
      // The broken stream skips a chunk half way: DATA_LOSS at the next one.
      if (broken && offset == total / 2 / chunk * chunk) continue;
      status = assembler.AddBytes(
          v1::wire::ResultDataMessage(offset, grpc::Slice(bytes.data() + offset, n)));
    }
    if (broken) {
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status.message();
      continue;
    }
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_TRUE(assembler.AddBytes(serialized(Trailer())).ok());
    absl::StatusOr<Result> result = std::move(assembler).Finish();
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_TRUE(result->data == bytes);
  }
}

TEST_F(ResultAssemblerTest, OneCompleteMessageIsAWholeResult) {
  const std::string bytes = DoubleBytes({1.0, 2.5, -3.0});
  absl::StatusOr<Result> result = Assemble({Complete(Header(v1::FLOAT64, {3}, 24), bytes, Trailer())});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->data, bytes);
  EXPECT_EQ(result->trailer.timing().compute_us(), 42u);

  absl::StatusOr<Result> kept = Assemble(
      {Complete(Header(v1::FLOAT32, {1000}, 4000), "", Trailer(true))}, /*expect_data=*/false);
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  EXPECT_EQ(kept->trailer.stored_buffer().id(), "abc");
}

TEST_F(ResultAssemblerTest, CompleteMessageIsCheckedLikeThreeMessages) {
  ExpectDataLoss(Assemble({Complete(Header(v1::FLOAT32, {4}, 16), std::string(12, 'a'), Trailer())}),
                 "short data: received 12 of 16 bytes");
  ExpectDataLoss(Assemble({Complete(Header(v1::FLOAT32, {2}, 8), std::string(8, 'a'), Trailer(true))},
                          /*expect_data=*/false),
                 "kept on device");
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {0}, 0),
                           Complete(Header(v1::FLOAT32, {0}, 0), "", Trailer())}),
                 "second header");
}

TEST_F(ResultAssemblerTest, EmptyResultNeedsNoDataChunks) {
  absl::StatusOr<Result> result = Assemble({Header(v1::FLOAT32, {0, 5}, 0), Trailer()});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(result->data.empty());
}

TEST_F(ResultAssemblerTest, KeptOnDeviceHasNoDataAndNamesTheBuffer) {
  absl::StatusOr<Result> result =
      Assemble({Header(v1::FLOAT32, {1000}, 4000), Trailer(/*with_stored_buffer=*/true)},
               /*expect_data=*/false);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(result->data.empty());
  EXPECT_EQ(result->trailer.stored_buffer().id(), "abc");
}

TEST_F(ResultAssemblerTest, KeptOnDeviceWithoutStoredBufferIsDataLoss) {
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {2}, 8), Trailer()}, /*expect_data=*/false),
                 "names no stored buffer");
}

TEST_F(ResultAssemblerTest, KeptOnDeviceWithDataIsDataLoss) {
  ExpectDataLoss(
      Assemble({Header(v1::FLOAT32, {2}, 8), Data(0, std::string(8, 'x')), Trailer(true)},
               /*expect_data=*/false),
      "kept on device");
}

TEST_F(ResultAssemblerTest, MissingHeader) {
  ExpectDataLoss(Assemble({Data(0, "abcd"), Trailer()}), "data before the header");
  ExpectDataLoss(Assemble({Trailer()}), "trailer before the header");
  ExpectDataLoss(Assemble({}), "ended without a header");
}

TEST_F(ResultAssemblerTest, SecondHeader) {
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {1}, 4), Header(v1::FLOAT32, {1}, 4)}),
                 "second header");
}

TEST_F(ResultAssemblerTest, HeaderInconsistentWithShape) {
  ExpectDataLoss(Assemble({Header(v1::FLOAT64, {2, 3}, 24), Trailer()}),
                 "declares 24 bytes but float64 (2, 3) is 48");
  ExpectDataLoss(Assemble({Header(v1::DTYPE_UNSPECIFIED, {2}, 8), Trailer()}), "invalid header");
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {-2}, 8), Trailer()}), "negative extent");
}

TEST_F(ResultAssemblerTest, OffsetMismatch) {
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {4}, 16), Data(0, std::string(8, 'a')),
                           Data(12, std::string(8, 'b'))}),
                 "chunk at offset 12, expected offset 8");
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {4}, 16), Data(4, std::string(4, 'a'))}),
                 "expected offset 0");
}

TEST_F(ResultAssemblerTest, Overrun) {
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {2}, 8), Data(0, std::string(12, 'a'))}),
                 "overruns the declared 8 bytes");
}

TEST_F(ResultAssemblerTest, ShortData) {
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {4}, 16), Data(0, std::string(12, 'a')), Trailer()}),
                 "short data: received 12 of 16 bytes");
}

TEST_F(ResultAssemblerTest, MissingTrailer) {
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {4}, 16), Data(0, std::string(16, 'a'))}),
                 "ended without a trailer after 16 of 16 bytes");
}

TEST_F(ResultAssemblerTest, MessageAfterTrailer) {
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {0}, 0), Trailer(), Trailer()}),
                 "after the trailer");
}

TEST_F(ResultAssemblerTest, EmptyMessage) {
  ExpectDataLoss(Assemble({Header(v1::FLOAT32, {0}, 0), v1::ResultChunk()}), "empty message");
}

TEST_F(ResultAssemblerTest, ResultOverTheClientLimitIsRefusedBeforeAllocating) {
  absl::StatusOr<Result> result =
      Assemble({Header(v1::FLOAT64, {1 << 20, 1 << 20}, uint64_t{8} << 40)}, true, 1 << 20);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace gpucompute::client
