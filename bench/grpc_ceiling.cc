// grpc-ceiling: what gRPC itself moves on one stream over loopback, with the
// service's transport settings and none of its work: the anchor for
// bulk-transfer-bench's one-stream figures, beside tcp_ceiling.py's
// plain sockets. A generic callback server drops what it reads (/ceiling/Sink)
// or writes slices of one static buffer (/ceiling/Source); the client sends
// slices of one static buffer, or reads and drops, through the C++ client's
// channel (MakeChannel: 16 MiB HTTP/2 frames). No copy on either side but the
// kernel's and gRPC's own.
//
//   grpc-ceiling --serve --port=50600 &
//   grpc-ceiling --target=127.0.0.1:50600 --bytes=2147483648 --message_bytes=4128768
//
// Prints: grpc ceiling, one stream: upload 2.00 GiB ... GB/s, download ... GB/s
#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/channel_args.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/client_callback.h"

ABSL_FLAG(bool, serve, false, "run the server (else the client)");
ABSL_FLAG(int, port, 50600, "the server's port on 127.0.0.1");
ABSL_FLAG(std::string, target, "127.0.0.1:50600", "the client's server");
ABSL_FLAG(uint64_t, bytes, uint64_t{2} << 30, "bytes each way");
ABSL_FLAG(uint64_t, message_bytes, (uint64_t{4} << 20) - (64 << 10),
          "bytes per message (the C++ client's upload message size by default)");
ABSL_FLAG(int, repeat, 3, "transfers each way; the median is reported");

namespace {

constexpr char kSink[] = "/ceiling/Sink";
constexpr char kSource[] = "/ceiling/Source";

// One static block that every message's slice points into.
const std::string& Payload(uint64_t bytes) {
  static const std::string payload(bytes, 'x');
  return payload;
}

grpc::ByteBuffer StaticMessage(uint64_t bytes) {
  grpc::Slice slice(Payload(bytes).data(), bytes, grpc::Slice::STATIC_SLICE);
  return grpc::ByteBuffer(&slice, 1);
}

// /ceiling/Sink: reads every message and drops it. /ceiling/Source: reads one
// message, 16 bytes (total, message size), then writes that many bytes.
class CeilingReactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit CeilingReactor(bool source) : source_(source) { StartRead(&in_); }

  void OnReadDone(bool ok) override {
    if (!source_) {
      if (ok) return StartRead(&in_);
      return Finish(grpc::Status::OK);
    }
    if (!ok) return Finish(grpc::Status(grpc::INVALID_ARGUMENT, "no request"));
    std::vector<grpc::Slice> slices;
    uint64_t request[2] = {0, 0};
    if (!in_.Dump(&slices).ok() || slices.empty() || slices[0].size() < sizeof(request)) {
      return Finish(grpc::Status(grpc::INVALID_ARGUMENT, "request is 16 bytes"));
    }
    std::memcpy(request, slices[0].begin(), sizeof(request));
    left_ = request[0];
    message_bytes_ = std::max<uint64_t>(1, request[1]);
    WriteNext();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status(grpc::CANCELLED, "write failed"));
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    if (left_ == 0) return Finish(grpc::Status::OK);
    const uint64_t n = std::min(left_, message_bytes_);
    left_ -= n;
    out_ = StaticMessage(n);
    StartWrite(&out_);
  }

  const bool source_;
  grpc::ByteBuffer in_, out_;
  uint64_t left_ = 0, message_bytes_ = 0;
};

class CeilingService final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
    return new CeilingReactor(context->method() == kSource);
  }
};

int Serve() {
  Payload(absl::GetFlag(FLAGS_message_bytes) * 4);  // before any stream, on this thread
  CeilingService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrFormat("127.0.0.1:%d", absl::GetFlag(FLAGS_port)),
                           grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, gpucompute::kMaxSocketReadBytes);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, gpucompute::kMaxHttp2FrameBytes);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 1;
  server->Wait();
  return 0;
}

double Median(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

int RunClient() {
  const uint64_t bytes = absl::GetFlag(FLAGS_bytes);
  const uint64_t message_bytes = absl::GetFlag(FLAGS_message_bytes);
  Payload(message_bytes * 4);
  std::shared_ptr<grpc::Channel> channel = gpucompute::client::MakeChannel(absl::GetFlag(FLAGS_target));
  const grpc::internal::RpcMethod sink(kSink, grpc::internal::RpcMethod::BIDI_STREAMING);
  const grpc::internal::RpcMethod source(kSource, grpc::internal::RpcMethod::BIDI_STREAMING);
  std::vector<double> up, down;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeat); ++r) {
    {
      grpc::ClientContext context;
      absl::Time start = absl::Now();
      auto stream = std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>(
          grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
              channel.get(), sink, &context));
      for (uint64_t at = 0; at < bytes; at += message_bytes) {
        if (!stream->Write(StaticMessage(std::min(message_bytes, bytes - at)))) break;
      }
      stream->WritesDone();
      const grpc::Status status = stream->Finish();
      if (!status.ok()) {
        std::cerr << "upload: " << status.error_message() << "\n";
        return 1;
      }
      up.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    {
      grpc::ClientContext context;
      absl::Time start = absl::Now();
      auto stream = std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>(
          grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
              channel.get(), source, &context));
      const uint64_t request[2] = {bytes, message_bytes};
      grpc::Slice slice(request, sizeof(request));
      stream->Write(grpc::ByteBuffer(&slice, 1));
      stream->WritesDone();
      grpc::ByteBuffer message;
      uint64_t received = 0;
      while (stream->Read(&message)) received += message.Length();
      const grpc::Status status = stream->Finish();
      if (!status.ok() || received != bytes) {
        std::cerr << "download: " << status.error_message() << ", " << received << " bytes\n";
        return 1;
      }
      down.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  std::cout << absl::StrFormat(
      "grpc ceiling, one stream, %.2f GiB in %llu-byte messages: upload %.2f GB/s, download "
      "%.2f GB/s (medians of %d)\n",
      static_cast<double>(bytes) / (1 << 30), static_cast<unsigned long long>(message_bytes),
      gb / Median(up), gb / Median(down), absl::GetFlag(FLAGS_repeat));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return absl::GetFlag(FLAGS_serve) ? Serve() : RunClient();
}
