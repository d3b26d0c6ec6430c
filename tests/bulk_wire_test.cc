// proto/gpucompute/v1/bulk_wire.h: the hand-framed bulk messages are exactly what
// the generated code reads, and payloads are found in any slicing of a message.
#include "gpucompute/v1/bulk_wire.h"

#include <string>
#include <vector>

#include "gpucompute/v1/gpucompute.pb.h"
#include "gtest/gtest.h"

namespace gpucompute::v1::wire {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  const MessageBytes bytes(buffer);
  std::string out(bytes.size(), '\0');
  bytes.CopyOut(0, bytes.size(), out.data());
  return out;
}

// `serialized` cut into pieces of `piece` bytes, as a socket read might deliver it.
grpc::ByteBuffer Sliced(const std::string& serialized, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < serialized.size(); at += piece) {
    slices.emplace_back(serialized.data() + at, std::min(piece, serialized.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(BulkWireTest, ResultDataParsesAsTheGeneratedMessage) {
  for (uint64_t offset : {uint64_t{0}, uint64_t{1}, uint64_t{300}, uint64_t{1} << 40}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{70000}}) {
      const std::string payload(n, 'x');
      const std::string wire = Flatten(ResultDataMessage(offset, grpc::Slice(payload)));
      ResultChunk parsed;
      ASSERT_TRUE(parsed.ParseFromString(wire));
      ASSERT_TRUE(parsed.has_data());
      EXPECT_EQ(parsed.data().offset(), offset);
      EXPECT_EQ(parsed.data().data(), payload);
      // Byte for byte what protobuf writes (which omits an empty payload).
      if (n > 0) EXPECT_EQ(wire, parsed.SerializeAsString()) << "offset " << offset << " n " << n;
    }
  }
}

TEST(BulkWireTest, FindsTheResultPayloadInAnySlicing) {
  ResultChunk chunk;
  chunk.mutable_data()->set_offset(12345);
  std::string payload(5000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
  chunk.mutable_data()->set_data(payload);
  const std::string serialized = chunk.SerializeAsString();
  for (size_t piece : {size_t{1}, size_t{3}, size_t{64}, serialized.size()}) {
    const MessageBytes bytes(Sliced(serialized, piece));
    const std::optional<DataPayload> found = FindResultData(bytes);
    ASSERT_TRUE(found.has_value()) << piece;
    EXPECT_EQ(found->offset, 12345u);
    std::string copied(found->size, '\0');
    bytes.CopyOut(found->start, found->size, copied.data());
    EXPECT_EQ(copied, payload);
  }
}

TEST(BulkWireTest, OtherMessagesAreLeftToTheParser) {
  ResultChunk header;
  header.mutable_header()->set_total_bytes(8);
  EXPECT_FALSE(FindResultData(MessageBytes(SerializedMessage(header))).has_value());
  ResultChunk truncated;
  truncated.mutable_data()->set_data("abcdef");
  const std::string serialized = truncated.SerializeAsString();
  EXPECT_FALSE(
      FindResultData(MessageBytes(Sliced(serialized.substr(0, serialized.size() - 1), 2)))
          .has_value());
  UploadRequest upload_header;
  upload_header.mutable_header()->set_name("x");
  EXPECT_FALSE(FindUploadData(MessageBytes(SerializedMessage(upload_header))).has_value());
}

TEST(BulkWireTest, CompleteResultIsWhatProtobufWrites) {
  ResultHeader header;
  header.set_dtype(FLOAT32);
  header.add_shape(4);
  ResultTrailer trailer;
  trailer.set_backend("cpu");
  trailer.mutable_timing()->set_total_us(300);
  for (size_t n : {size_t{0}, size_t{16}, size_t{70000}}) {
    header.set_total_bytes(n);
    std::string payload(n, '\0');
    for (size_t i = 0; i < n; ++i) payload[i] = static_cast<char>(i * 13);
    const grpc::ByteBuffer message = ResultCompleteMessage(header, grpc::Slice(payload), trailer);
    ResultChunk parsed;
    ASSERT_TRUE(ParseMessageBytes(message, parsed)) << n;
    ASSERT_TRUE(parsed.has_complete());
    EXPECT_EQ(parsed.complete().header().total_bytes(), n);
    EXPECT_EQ(parsed.complete().data(), payload);
    EXPECT_EQ(parsed.complete().trailer().backend(), "cpu");
    EXPECT_EQ(Flatten(message), parsed.SerializeAsString()) << n;
    // Not mistaken for a data chunk by the fast path.
    EXPECT_FALSE(FindResultData(MessageBytes(message)).has_value());
  }
}

TEST(BulkWireTest, UploadDataRoundTrips) {
  const std::string payload(200000, 'q');
  const grpc::ByteBuffer message = UploadDataMessage(grpc::Slice(payload));
  UploadRequest parsed;
  ASSERT_TRUE(ParseMessageBytes(message, parsed));
  EXPECT_EQ(parsed.data(), payload);
  const MessageBytes bytes(Sliced(Flatten(message), 4096));
  const std::optional<DataPayload> found = FindUploadData(bytes);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->size, payload.size());
}

}  // namespace
}  // namespace gpucompute::v1::wire
