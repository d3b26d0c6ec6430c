#include "client/format.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/tensor.h"
#include "google/protobuf/util/json_util.h"

namespace gpucompute::client {
namespace {

std::string FormatCreated(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string JoinDTypes(const google::protobuf::RepeatedField<int>& dtypes) {
  std::vector<std::string> names;
  for (int dtype : dtypes) names.emplace_back(DTypeName(static_cast<v1::DType>(dtype)));
  return absl::StrJoin(names, ", ");
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatServerInfo(const v1::ServerInfo& info) {
  std::string out = absl::StrFormat("version     %s\n", info.version());
  absl::StrAppendFormat(&out, "instance    %s\n", info.instance_id());
  absl::StrAppendFormat(
      &out, "backend     %s%s\n", info.backend(),
      info.backend_note().empty() ? "" : absl::StrCat(" (", info.backend_note(), ")"));
  absl::StrAppend(&out, "devices\n");
  for (const v1::DeviceInfo& device : info.devices()) {
    absl::StrAppendFormat(&out, "  %-10s %-40s %10s  %s\n", device.name(), device.description(),
                          FormatBytes(device.memory_bytes()),
                          device.healthy() ? "healthy" : "UNHEALTHY");
  }
  absl::StrAppend(&out, "operations\n");
  for (const v1::OperationInfo& operation : info.operations()) {
    absl::StrAppendFormat(&out, "  %-16s %s\n", operation.name(), JoinDTypes(operation.dtypes()));
  }
  const v1::Limits& limits = info.limits();
  absl::StrAppend(&out, "limits\n");
  absl::StrAppendFormat(&out, "  %-26s %s\n", "max receive message",
                        FormatBytes(limits.max_receive_message_bytes()));
  absl::StrAppendFormat(&out, "  %-26s %s\n", "buffer quota",
                        FormatBytes(limits.buffer_quota_bytes()));
  absl::StrAppendFormat(&out, "  %-26s min %s, default %s, max %s\n", "result chunk",
                        FormatBytes(limits.min_chunk_bytes()),
                        FormatBytes(limits.default_chunk_bytes()),
                        FormatBytes(limits.max_chunk_bytes()));
  absl::StrAppendFormat(&out, "  %-26s %d\n", "max rank", limits.max_rank());
  absl::StrAppendFormat(&out, "  %-26s %d\n", "max elements", limits.max_elements());
  absl::StrAppendFormat(&out, "  %-26s %d\n", "executor threads", limits.executor_threads());
  absl::StrAppendFormat(&out, "  %-26s %d\n", "max queue depth", limits.max_queue_depth());
  absl::StrAppendFormat(&out, "  %-26s %d\n", "max device queue depth",
                        limits.max_device_queue_depth());
  return out;
}

std::string FormatBufferInfo(const v1::BufferInfo& buffer) {
  std::string out;
  absl::StrAppendFormat(&out, "id        %s\n", buffer.id());
  absl::StrAppendFormat(&out, "name      %s\n", buffer.name());
  absl::StrAppendFormat(&out, "dtype     %s\n", DTypeName(buffer.dtype()));
  absl::StrAppendFormat(&out, "shape     %s\n", ShapeToString(ShapeOf(buffer.shape())));
  absl::StrAppendFormat(&out, "bytes     %d (%s)\n", buffer.bytes(), FormatBytes(buffer.bytes()));
  absl::StrAppendFormat(&out, "location  %s\n", buffer.location());
  absl::StrAppendFormat(&out, "created   %s\n", FormatCreated(buffer.created_unix_ms()));
  return out;
}

std::string FormatBufferList(const v1::ListResponse& list) {
  std::string out = absl::StrFormat("%-32s  %-20s  %-7s  %-16s  %10s  %-8s  %s\n", "ID", "NAME",
                                    "DTYPE", "SHAPE", "SIZE", "LOCATION", "CREATED");
  for (const v1::BufferInfo& buffer : list.buffers()) {
    absl::StrAppendFormat(&out, "%-32s  %-20s  %-7s  %-16s  %10s  %-8s  %s\n", buffer.id(),
                          buffer.name(), DTypeName(buffer.dtype()),
                          ShapeToString(ShapeOf(buffer.shape())), FormatBytes(buffer.bytes()),
                          buffer.location(), FormatCreated(buffer.created_unix_ms()));
  }
  absl::StrAppendFormat(&out, "%d buffers, %s used of %s quota\n", list.buffers_size(),
                        FormatBytes(list.used_bytes()), FormatBytes(list.quota_bytes()));
  return out;
}

std::string FormatTrailer(const v1::ResultTrailer& trailer) {
  const v1::Timing& timing = trailer.timing();
  // The algorithm, where the operation had a choice (LombScargle's direct or nufft).
  const std::string method =
      trailer.method().empty() ? "" : absl::StrCat(", method ", trailer.method());
  // The stages in order; what they leave of the total is the rest (gRPC, the
  // executor hop), or, when streamed stages overlap, the overlap.
  const uint64_t stages = timing.prepare_us() + timing.queue_us() + timing.transfer_in_us() +
                          timing.compute_us() + timing.transfer_out_us() +
                          timing.stream_write_us();
  const std::string rest =
      stages <= timing.total_us()
          ? absl::StrCat("other ", timing.total_us() - stages)
          : absl::StrCat("overlapped ", stages - timing.total_us());
  std::string out = absl::StrFormat(
      "backend     %s on %s%s\n"
      "timing (us) queue %d, transfer in %d, compute %d, transfer out %d, stream write %d, "
      "prepare %d, %s; total %d\n",
      trailer.backend(), trailer.device(), method, timing.queue_us(), timing.transfer_in_us(),
      timing.compute_us(), timing.transfer_out_us(), timing.stream_write_us(),
      timing.prepare_us(), rest, timing.total_us());
  if (trailer.streamed_chunks() > 0) {
    absl::StrAppendFormat(&out, "streamed    %d chunks\n", trailer.streamed_chunks());
  }
  return out;
}

std::string FormatPreview(const Result& result, size_t max_values) {
  absl::StatusOr<std::vector<double>> values = result.AsDoubles();
  if (!values.ok()) return absl::StrCat("(", values.status().message(), ")");
  const size_t shown = std::min(max_values, values->size());
  std::vector<std::string> texts;
  for (size_t i = 0; i < shown; ++i) texts.push_back(absl::StrFormat("%.6g", (*values)[i]));
  if (shown < values->size()) texts.emplace_back("...");
  return absl::StrCat("[", absl::StrJoin(texts, ", "), "]");
}

absl::StatusOr<std::string> FormatJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return absl::InternalError(std::string(status.message()));
  return json + "\n";
}

}  // namespace gpucompute::client
