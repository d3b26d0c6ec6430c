#include "gpucompute/v1/bulk_wire.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace gpucompute::v1::wire {
namespace {

using google::protobuf::io::CodedOutputStream;

// Field 2, length-delimited: ResultChunk.data, ResultData.data, UploadRequest.data.
constexpr uint8_t kField2Bytes = 0x12;
// Field 1 / 3, length-delimited: ResultComplete.header / trailer.
constexpr uint8_t kField1Bytes = 0x0A;
constexpr uint8_t kField3Bytes = 0x1A;
// Field 140, length-delimited: ResultChunk.complete.
constexpr uint32_t kCompleteTag = (140 << 3) | 2;
// Field 1, varint: ResultData.offset.
constexpr uint8_t kField1Varint = 0x08;
// The longest framing before a payload: two tags, three 10-byte varints.
constexpr size_t kMaxPrefixBytes = 32;

// Reads a varint at `pos` of `p` (`n` bytes); false when truncated or too long.
bool ReadVarint(const uint8_t* p, size_t n, size_t& pos, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && pos < n; shift += 7) {
    const uint8_t byte = p[pos++];
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

uint8_t* WriteTagAndLength(uint8_t tag, uint64_t length, uint8_t* out) {
  *out++ = tag;
  return CodedOutputStream::WriteVarint64ToArray(length, out);
}

grpc::ByteBuffer PrefixAnd(const uint8_t* prefix, size_t prefix_bytes, grpc::Slice payload) {
  grpc::Slice slices[2] = {grpc::Slice(prefix, prefix_bytes), std::move(payload)};
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace

MessageBytes::MessageBytes(const grpc::ByteBuffer& buffer) {
  if (buffer.Valid()) (void)buffer.Dump(&slices_);
  for (const grpc::Slice& slice : slices_) size_ += slice.size();
}

void MessageBytes::CopyOut(uint64_t start, uint64_t n, void* dst) const {
  char* out = static_cast<char*>(dst);
  ForEachPiece(start, n, [&out](const char* piece, uint64_t length) {
    std::memcpy(out, piece, length);
    out += length;
  });
}

std::optional<DataPayload> FindResultData(const MessageBytes& bytes) {
  uint8_t head[kMaxPrefixBytes];
  const size_t n = std::min<uint64_t>(bytes.size(), kMaxPrefixBytes);
  bytes.CopyOut(0, n, head);
  size_t pos = 0;
  uint64_t length = 0;
  if (n < 2 || head[pos++] != kField2Bytes || !ReadVarint(head, n, pos, length) ||
      pos + length != bytes.size()) {
    return std::nullopt;
  }
  DataPayload payload;
  if (pos < n && head[pos] == kField1Varint) {
    ++pos;
    if (!ReadVarint(head, n, pos, payload.offset)) return std::nullopt;
  }
  if (pos >= n || head[pos++] != kField2Bytes || !ReadVarint(head, n, pos, payload.size) ||
      pos + payload.size != bytes.size()) {
    return std::nullopt;
  }
  payload.start = pos;
  return payload;
}

std::optional<DataPayload> FindUploadData(const MessageBytes& bytes) {
  uint8_t head[kMaxPrefixBytes];
  const size_t n = std::min<uint64_t>(bytes.size(), kMaxPrefixBytes);
  bytes.CopyOut(0, n, head);
  size_t pos = 0;
  DataPayload payload;
  if (n < 1 || head[pos++] != kField2Bytes || !ReadVarint(head, n, pos, payload.size) ||
      pos + payload.size != bytes.size()) {
    return std::nullopt;
  }
  payload.start = pos;
  return payload;
}

grpc::ByteBuffer ResultDataMessage(uint64_t offset, grpc::Slice payload) {
  const uint64_t n = payload.size();
  // ResultData: [offset field, omitted when 0 as protobuf does] [data tag, length].
  uint64_t inner = 1 + CodedOutputStream::VarintSize64(n) + n;
  if (offset != 0) inner += 1 + CodedOutputStream::VarintSize64(offset);
  uint8_t prefix[kMaxPrefixBytes];
  uint8_t* out = WriteTagAndLength(kField2Bytes, inner, prefix);
  if (offset != 0) {
    *out++ = kField1Varint;
    out = CodedOutputStream::WriteVarint64ToArray(offset, out);
  }
  out = WriteTagAndLength(kField2Bytes, n, out);
  return PrefixAnd(prefix, out - prefix, std::move(payload));
}

grpc::ByteBuffer UploadDataMessage(grpc::Slice payload) {
  uint8_t prefix[kMaxPrefixBytes];
  const uint8_t* end = WriteTagAndLength(kField2Bytes, payload.size(), prefix);
  return PrefixAnd(prefix, end - prefix, std::move(payload));
}

grpc::ByteBuffer UploadDataMessage(std::vector<grpc::Slice> payload) {
  uint64_t n = 0;
  for (const grpc::Slice& slice : payload) n += slice.size();
  uint8_t prefix[kMaxPrefixBytes];
  const uint8_t* end = WriteTagAndLength(kField2Bytes, n, prefix);
  payload.insert(payload.begin(), grpc::Slice(prefix, end - prefix));
  return grpc::ByteBuffer(payload.data(), payload.size());
}

grpc::ByteBuffer ResultCompleteMessage(const google::protobuf::MessageLite& header,
                                       grpc::Slice payload,
                                       const google::protobuf::MessageLite& trailer) {
  const std::string header_bytes = header.SerializeAsString();
  const std::string trailer_bytes = trailer.SerializeAsString();
  const uint64_t n = payload.size();
  const uint64_t header_field =
      1 + CodedOutputStream::VarintSize64(header_bytes.size()) + header_bytes.size();
  const uint64_t data_field = n == 0 ? 0 : 1 + CodedOutputStream::VarintSize64(n) + n;
  const uint64_t trailer_field =
      1 + CodedOutputStream::VarintSize64(trailer_bytes.size()) + trailer_bytes.size();
  // Fields in number order, as protobuf serializes them: header, data, trailer.
  std::string prefix(kMaxPrefixBytes + header_bytes.size(), '\0');
  uint8_t* const begin = reinterpret_cast<uint8_t*>(prefix.data());
  uint8_t* out = CodedOutputStream::WriteVarint32ToArray(kCompleteTag, begin);
  out = CodedOutputStream::WriteVarint64ToArray(header_field + data_field + trailer_field, out);
  out = WriteTagAndLength(kField1Bytes, header_bytes.size(), out);
  out = std::copy(header_bytes.begin(), header_bytes.end(), out);
  if (n > 0) out = WriteTagAndLength(kField2Bytes, n, out);
  prefix.resize(out - begin);
  std::string suffix(1 + CodedOutputStream::VarintSize64(trailer_bytes.size()), '\0');
  WriteTagAndLength(kField3Bytes, trailer_bytes.size(), reinterpret_cast<uint8_t*>(suffix.data()));
  suffix += trailer_bytes;
  grpc::Slice slices[3] = {grpc::Slice(prefix), std::move(payload), grpc::Slice(suffix)};
  if (n == 0) {
    grpc::Slice parts[2] = {std::move(slices[0]), std::move(slices[2])};
    return grpc::ByteBuffer(parts, 2);
  }
  return grpc::ByteBuffer(slices, 3);
}

grpc::ByteBuffer SerializedMessage(const google::protobuf::MessageLite& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

bool ParseMessageBytes(const grpc::ByteBuffer& buffer, google::protobuf::MessageLite& message) {
  grpc::ByteBuffer shared(buffer);  // the reader needs a mutable buffer; slices are shared
  grpc::ProtoBufferReader reader(&shared);
  return message.ParseFromZeroCopyStream(&reader);
}

}  // namespace gpucompute::v1::wire
