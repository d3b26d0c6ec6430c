// The two bulk messages of API v1 on the wire without a copy through protobuf:
// ResultChunk{data: ResultData{offset, data}}, ResultChunk{complete} and
// UploadRequest{data}.
//
// Built: a few bytes of tags and lengths in one slice, then the payload slice as
// given (memory the sender already holds: a host array, a chunk copied from a
// device, the caller's array), so gRPC writes it straight from there.
// Read: the received message's slices are referenced, not joined; Find* locates
// the payload within them when the message has the one canonical layout the
// senders here produce (any other valid encoding returns nullopt and goes
// through the generated parser), and CopyOut copies it once, to its destination.
// Shared by the server and the C++ client (both depend on proto/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace gpucompute::v1::wire {

// One received message as the slices gRPC holds (referenced, not copied).
class MessageBytes {
 public:
  explicit MessageBytes(const grpc::ByteBuffer& buffer);
  uint64_t size() const { return size_; }
  // Copies bytes [start, start + n) to dst; the range must lie within size().
  void CopyOut(uint64_t start, uint64_t n, void* dst) const;
  // Calls fn(pointer, length) for each contiguous piece of [start, start + n).
  template <typename Fn>
  void ForEachPiece(uint64_t start, uint64_t n, Fn fn) const {
    for (const grpc::Slice& slice : slices_) {
      if (n == 0) return;
      if (start >= slice.size()) {
        start -= slice.size();
        continue;
      }
      const uint64_t take = std::min<uint64_t>(n, slice.size() - start);
      fn(reinterpret_cast<const char*>(slice.begin()) + start, take);
      start = 0;
      n -= take;
    }
  }

 private:
  std::vector<grpc::Slice> slices_;
  uint64_t size_ = 0;
};

// Where a message's data payload lies: bytes [start, start + size) of the message.
struct DataPayload {
  uint64_t offset = 0;  // ResultData.offset (0 for UploadRequest)
  uint64_t start = 0;
  uint64_t size = 0;
};

// The payload of ResultChunk{data} / UploadRequest{data} in the canonical layout.
std::optional<DataPayload> FindResultData(const MessageBytes& bytes);
std::optional<DataPayload> FindUploadData(const MessageBytes& bytes);

// The messages around `payload`, which they reference.
grpc::ByteBuffer ResultDataMessage(uint64_t offset, grpc::Slice payload);
grpc::ByteBuffer UploadDataMessage(grpc::Slice payload);
// The same with a payload of several slices, in order (StreamingComputeRequest{data}
// has UploadRequest{data}'s layout: the haversine lat and lon rows of one chunk).
grpc::ByteBuffer UploadDataMessage(std::vector<grpc::Slice> payload);
// ResultChunk{complete: ResultComplete{header, data, trailer}}: the header's and
// the trailer's bytes around `payload` (empty: no data field, as for a kept result).
grpc::ByteBuffer ResultCompleteMessage(const google::protobuf::MessageLite& header,
                                       grpc::Slice payload,
                                       const google::protobuf::MessageLite& trailer);
// Any other (small) message, serialized.
grpc::ByteBuffer SerializedMessage(const google::protobuf::MessageLite& message);
// Parses a whole received message; false when it is not a valid `message`.
bool ParseMessageBytes(const grpc::ByteBuffer& buffer, google::protobuf::MessageLite& message);

}  // namespace gpucompute::v1::wire
