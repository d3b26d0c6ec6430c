#include "server/request_parse.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "gpucompute/v1/bulk_wire.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace gpucompute {
namespace {

using google::protobuf::internal::WireFormatLite;

// Why protobuf refused `bytes`, found by walking its top-level fields: the
// first field that does not parse, else what the walk cannot see.
std::string WhyMalformed(const grpc::ByteBuffer& bytes) {
  std::vector<grpc::Slice> slices;
  std::string flat;
  if (bytes.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(flat.data()),
                                            static_cast<int>(flat.size()));
  while (in.CurrentPosition() < static_cast<int>(flat.size())) {
    const int at = in.CurrentPosition();
    uint64_t tag = 0;
    if (!in.ReadVarint64(&tag)) {
      return absl::StrCat("the field tag at byte ", at, " is cut short or longer than 10 bytes");
    }
    const uint64_t field = tag >> 3;
    const int wire_type = static_cast<int>(tag & 7);
    if (field == 0) return absl::StrCat("field number 0 at byte ", at);
    if (field > static_cast<uint64_t>(google::protobuf::FieldDescriptor::kMaxNumber)) {
      return absl::StrCat("field number ", field, " at byte ", at, " is over the limit 2^29-1");
    }
    if (wire_type > WireFormatLite::WIRETYPE_FIXED32) {
      return absl::StrCat("field ", field, " at byte ", at, " has wire type ", wire_type);
    }
    if (!WireFormatLite::SkipField(&in, static_cast<uint32_t>(tag))) {
      return absl::StrCat("field ", field, " (wire type ", wire_type, ") at byte ", at,
                          " is cut short, or its varint or length prefix is malformed");
    }
  }
  return "a nested message is malformed or a string field is not valid UTF-8";
}

}  // namespace

absl::Status ParseMessage(const grpc::ByteBuffer& bytes, absl::string_view what,
                          google::protobuf::MessageLite& message) {
  grpc::ByteBuffer copy(bytes);  // shares the slices: the reader needs a mutable buffer
  grpc::ProtoBufferReader reader(&copy);
  if (reader.status().ok() && message.ParseFromZeroCopyStream(&reader)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(what, " is not a valid ", message.GetTypeName(),
                                                 " (", bytes.Length(), " bytes): ",
                                                 WhyMalformed(bytes)));
}

grpc::Status AnswerWith(const grpc::Status& status, const google::protobuf::MessageLite& response,
                        grpc::ByteBuffer* bytes) {
  if (status.ok()) *bytes = v1::wire::SerializedMessage(response);
  return status;
}

}  // namespace gpucompute
