// Human-readable text for server replies, as gpucompute-cli prints them.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "client/result.h"
#include "google/protobuf/message.h"
#include "gpucompute/v1/gpucompute.pb.h"

namespace gpucompute::client {

// "512 B", "1.5 MiB".
std::string FormatBytes(uint64_t bytes);

// Multi-line, one "key  value" per line, each ending in '\n'.
std::string FormatServerInfo(const v1::ServerInfo& info);
std::string FormatBufferInfo(const v1::BufferInfo& buffer);
std::string FormatBufferList(const v1::ListResponse& list);

// protobuf's JSON mapping of `message`, with the .proto's field names and every
// field (defaults too), indented; ends in '\n'.
absl::StatusOr<std::string> FormatJson(const google::protobuf::Message& message);

// The trailer of a result: backend, device and the timing breakdown.
std::string FormatTrailer(const v1::ResultTrailer& trailer);

// Up to `max_values` elements, e.g. "[0.5, 1, 2.25, ...]".
std::string FormatPreview(const Result& result, size_t max_values);

}  // namespace gpucompute::client
