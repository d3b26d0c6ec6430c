// libFuzzer target over request validation (operations.cc Prepare*) and the CPU
// execution path (Execute on CreateCpuBackend(1)), plus a model of the
// Buffers.Upload framing over the real BufferStore and backend calls.
// Input format: tests/fuzz/fuzz_common.h; the result checks: result_checks.h.
// Build and run: scripts/fuzz.sh.
//
// Invariants checked (a violation aborts, which libFuzzer reports as a crash):
// - Prepare* fails only with INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED
//   and a message; on success the output has 1..max_elements elements, every
//   inline operand's data matches its shape, and no operand is another
//   principal's buffer.
// - Execute of a prepared request fails only with RESOURCE_EXHAUSTED or the
//   data-dependent INVALID_ARGUMENTs ("input row ...", "weights row ..."); on
//   success the result is a host array with exactly the prepared dtype/shape.
// - Values: DiscountProduct equals an independent broadcast multiply (bitwise);
//   HaversineGrid equals 2 R atan2(sqrt(h), sqrt(1 - h)) within a tolerance;
//   Normalize equals x / norm per row, and fails exactly on the first row whose
//   norm is 0 or not finite (rows whose norm is ill-conditioned are skipped).
// - Upload: the reactor's checks in order; committed buffers read back what was
//   sent; quota accounting returns to 0 once everything is deleted.
// - StreamingCompute: a header is refused only as Prepare* may refuse; an accepted
//   plan's rows tile its shape, ChunkRows takes whole rows and refuses a partial
//   one, and a chunk of its first rows runs into a result its runs cover exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/buffer_id.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/wire_format_lite.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dtype.h"
#include "kernels/shape_rules.h"
#include "server/buffer_store.h"
#include "server/metrics.h"
#include "server/prepared_operation.h"
#include "server/proto_convert.h"
#include "server/streaming_plan.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/result_checks.h"

namespace gpucompute::fuzz {
namespace {

constexpr uint64_t kQuotaBytes = uint64_t{64} << 20;
// Upload streams run in a fresh, small store so quotas are reachable.
constexpr uint64_t kUploadQuotaBytes = uint64_t{1} << 20;
constexpr uint64_t kUploadPrincipalQuotaBytes = uint64_t{512} << 10;
// Lomb-Scargle costs B * N * M; past this the harness validates but does not run it.
constexpr int64_t kMaxLombScargleWork = int64_t{1} << 22;

// ---------------------------------------------------------------------------
// The process-wide environment: store with the "$k" buffers, metrics, backend.

struct Env {
  Env()
      : store(kQuotaBytes),
        device_queues(1),  // one operation at a time: each must release its slot
        metrics(BuildInfo{"fuzz", "fuzz", "none", "cpu"}),
        backend(CreateCpuBackend(1)) {
    const std::vector<StoredBufferSpec>& specs = StoredBuffers();
    for (size_t k = 0; k < specs.size(); ++k) {
      const StoredBufferSpec& spec = specs[k];
      absl::StatusOr<std::shared_ptr<Array>> array =
          backend->Allocate(spec.dtype, spec.shape, backend->PickDevice());
      FUZZ_CHECK(array.ok(), StatusText(array.status()));
      for (int64_t i = 0; i < (*array)->size(); ++i) {
        const double v = 0.5 * static_cast<double>(i + 1);
        if (spec.dtype == DType::kFloat32) {
          (*array)->data_as<float>()[i] = static_cast<float>(v);
        } else {
          (*array)->data_as<double>()[i] = v;
        }
      }
      absl::StatusOr<BufferStore::Reservation> reservation =
          store.Reserve((*array)->bytes(), "fuzz seed buffer", spec.owner);
      FUZZ_CHECK(reservation.ok(), StatusText(reservation.status()));
      absl::StatusOr<StoredBuffer> stored =
          store.Commit(*std::move(reservation), absl::StrCat("$", k), *array);
      FUZZ_CHECK(stored.ok(), StatusText(stored.status()));
      ids.push_back(stored->id);
      arrays.push_back(*array);
    }
  }

  BufferStore store;
  DeviceQueues device_queues;
  Metrics metrics;
  std::unique_ptr<Backend> backend;
  std::vector<std::string> ids;
  std::vector<std::shared_ptr<Array>> arrays;
};

Env& GetEnv() {
  static Env* env = new Env;
  return *env;
}

RequestScope Scope(const Env& env) {
  return RequestScope{env.store, kPrincipal, kMaxElements};
}

// "$k" -> the id of stored buffer k. Returns whether FAILED_PRECONDITION may answer the
// operand: a buffer id issued by another replica instance (BufferStore::CheckIssuedHere;
// the fuzzer writes such ids too), or a shared-memory slice (Scope grants no registry,
// as a server started without --allow_shared_memory).
bool Rewrite(v1::Operand* operand, const Env& env) {
  if (operand->source_case() == v1::Operand::kSharedMemory) return true;
  if (operand->source_case() != v1::Operand::kBufferId) return false;
  const std::string& id = operand->buffer_id();
  if (id.size() == 2 && id[0] == '$' && id[1] >= '0' && id[1] <= '9') {
    const size_t k = static_cast<size_t>(id[1] - '0');
    if (k < env.ids.size()) operand->set_buffer_id(env.ids[k]);
  }
  const absl::string_view issuer = IssuingInstance(operand->buffer_id());
  return !issuer.empty() && issuer != env.store.instance_id();
}

// ---------------------------------------------------------------------------
// One compute request.

// Each returns whether FAILED_PRECONDITION may answer an operand.
bool Rewrite(v1::DiscountProductRequest& r, const Env& env) {
  bool refusable = false;
  if (r.has_factors()) refusable |= Rewrite(r.mutable_factors(), env);
  if (r.has_values()) refusable |= Rewrite(r.mutable_values(), env);
  return refusable;
}
bool Rewrite(v1::HaversineGridRequest& r, const Env& env) {
  if (!r.has_points()) return false;
  bool refusable = false;
  if (r.points().has_lat()) refusable |= Rewrite(r.mutable_points()->mutable_lat(), env);
  if (r.points().has_lon()) refusable |= Rewrite(r.mutable_points()->mutable_lon(), env);
  return refusable;
}
bool Rewrite(v1::NormalizeRequest& r, const Env& env) {
  return r.has_input() && Rewrite(r.mutable_input(), env);
}
bool Rewrite(v1::LombScargleRequest& r, const Env& env) {
  bool refusable = false;
  if (r.has_x()) refusable |= Rewrite(r.mutable_x(), env);
  if (r.has_y()) refusable |= Rewrite(r.mutable_y(), env);
  if (r.has_freqs()) refusable |= Rewrite(r.mutable_freqs(), env);
  if (r.has_weights()) refusable |= Rewrite(r.mutable_weights(), env);
  return refusable;
}

template <typename Request, typename PrepareFn, typename CheckFn>
void FuzzCompute(const uint8_t* data, size_t size, Operation op, PrepareFn prepare, CheckFn check,
                 bool (*worth_running)(const Request&, const PreparedOperation&)) {
  Env& env = GetEnv();
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  const bool refusable = Rewrite(request, env);
  absl::StatusOr<PreparedOperation> prepared = prepare(request, Scope(env));
  if (!prepared.ok()) {
    CheckPrepareError(prepared.status(), refusable);
    return;
  }
  CheckPrepared(*prepared, env.arrays);
  if (worth_running != nullptr && !worth_running(request, *prepared)) return;

  OpContext ctx;
  ExecutionTimes times;
  // As the compute service decides it: results of one default chunk go back from host
  // memory (Backend::RunFromHost where every operand is inline).
  uint64_t result_bytes = ElementSize(prepared->out_dtype);
  for (int64_t extent : prepared->out_shape) result_bytes *= static_cast<uint64_t>(extent);
  const bool result_to_host = result_bytes <= (uint64_t{1} << 20);
  absl::StatusOr<std::shared_ptr<Array>> out = Execute(
      *prepared, *env.backend, env.device_queues, env.metrics, ctx, times, result_to_host);
  FUZZ_CHECK(env.device_queues.depth(kHostDevice) == 0, "Execute kept its device queue slot");
  if (!out.ok()) {
    FUZZ_CHECK(ExpectedExecuteError(out.status(), op), StatusText(out.status()));
  } else {
    const Array& array = **out;
    FUZZ_CHECK(array.dtype() == prepared->out_dtype,
               absl::StrCat("result dtype ", DTypeName(array.dtype()), ", prepared ",
                            DTypeName(prepared->out_dtype)));
    FUZZ_CHECK(array.shape() == prepared->out_shape,
               absl::StrCat("result shape ", ShapeToString(array.shape()), ", prepared ",
                            ShapeToString(prepared->out_shape)));
    FUZZ_CHECK(array.size() == Product(prepared->out_shape) && array.device() == kHostDevice &&
                   array.bytes() == static_cast<size_t>(array.size()) * ElementSize(array.dtype()),
               "result size/device");
    FUZZ_CHECK(times.device == "cpu", times.device);
  }
  check(request, *prepared, out);
}

bool LombScargleWorthRunning(const v1::LombScargleRequest& request,
                             const PreparedOperation& prepared) {
  const int64_t samples = prepared.operands[1].shape.back();
  const int64_t outputs = Product(prepared.out_shape);  // B * M
  (void)request;
  return outputs <= kMaxLombScargleWork / samples;
}

// ---------------------------------------------------------------------------
// Buffers.Upload framing, as buffers_service.cc's UploadReactor applies it.

struct Committed {
  StoredBuffer buffer;
  std::string bytes;  // what the stream sent
  DType dtype;
  Shape shape;
};

struct UploadStream {
  std::string principal;
  std::optional<BufferStore::Reservation> reservation;
  std::shared_ptr<Array> array;
  uint64_t expected = 0;
  uint64_t received = 0;
  int messages = 0;
  std::string name;
  std::string sent;
  DType dtype = DType::kFloat64;
  Shape shape;
  bool done = false;  // completed with an error; later messages are ignored
};

void UploadFail(UploadStream& s, const absl::Status& status) {
  FUZZ_CHECK(!status.ok(), "UploadFail with OK");
  FUZZ_CHECK(absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status),
             StatusText(status));
  s.done = true;
  s.reservation.reset();
  s.array.reset();
}

void UploadMessage(UploadStream& s, const v1::UploadRequest& request, Env& env,
                   BufferStore& store) {
  if (s.done) return;
  switch (request.kind_case()) {
    case v1::UploadRequest::kHeader: {
      ++s.messages;
      if (s.array != nullptr || s.reservation.has_value()) {
        return UploadFail(s, absl::InvalidArgumentError("second header"));
      }
      const v1::UploadHeader& header = request.header();
      absl::StatusOr<DType> dtype = DTypeFromProto(header.dtype(), "header.dtype");
      if (!dtype.ok()) return UploadFail(s, dtype.status());
      Shape shape(header.shape().begin(), header.shape().end());
      absl::StatusOr<int64_t> count = CheckedElementCount(shape, kMaxElements, "header");
      if (!count.ok()) return UploadFail(s, count.status());
      if (*count == 0) return UploadFail(s, absl::InvalidArgumentError("empty"));
      if (header.name().size() > kMaxBufferNameBytes) {
        return UploadFail(s, absl::InvalidArgumentError("name too long"));
      }
      s.expected = static_cast<uint64_t>(*count) * ElementSize(*dtype);
      absl::StatusOr<BufferStore::Reservation> reservation =
          store.Reserve(s.expected, absl::StrCat("upload '", header.name(), "'"), s.principal);
      if (!reservation.ok()) {
        FUZZ_CHECK(absl::IsResourceExhausted(reservation.status()),
                   StatusText(reservation.status()));
        return UploadFail(s, reservation.status());
      }
      s.reservation = *std::move(reservation);
      s.name = header.name();
      s.dtype = *dtype;
      s.shape = shape;
      absl::StatusOr<std::shared_ptr<Array>> array =
          env.backend->Allocate(*dtype, std::move(shape), env.backend->PickDevice());
      FUZZ_CHECK(array.ok(), StatusText(array.status()));  // <= quota bytes: must fit
      FUZZ_CHECK((*array)->bytes() == s.expected, "allocated bytes");
      s.array = *std::move(array);
      return;
    }
    case v1::UploadRequest::kData: {
      ++s.messages;
      if (s.array == nullptr) return UploadFail(s, absl::InvalidArgumentError("data first"));
      const std::string& data = request.data();
      const uint64_t n = data.size();
      if (n > s.expected - s.received) {
        return UploadFail(s, absl::InvalidArgumentError("exceeds declared size"));
      }
      absl::Status copied = env.backend->CopyToArray(data.data(), s.received, n, *s.array);
      FUZZ_CHECK(copied.ok(), StatusText(copied));
      s.received += n;
      s.sent += data;
      return;
    }
    case v1::UploadRequest::KIND_NOT_SET:
      break;
  }
  UploadFail(s, absl::InvalidArgumentError("neither header nor data"));
}

void UploadEnd(UploadStream& s, BufferStore& store, std::vector<Committed>& committed) {
  if (s.done) return;
  if (s.array == nullptr) return UploadFail(s, absl::InvalidArgumentError("no header"));
  if (s.received != s.expected) return UploadFail(s, absl::InvalidArgumentError("short"));
  absl::StatusOr<StoredBuffer> stored =
      store.Commit(*std::move(s.reservation), s.name, std::move(s.array));
  s.reservation.reset();
  FUZZ_CHECK(stored.ok(), StatusText(stored.status()));
  FUZZ_CHECK(stored->owner == s.principal && stored->id.size() == 32, stored->id);
  committed.push_back(Committed{*stored, std::move(s.sent), s.dtype, s.shape});
}

const char* UploadPrincipal(int stream) { return stream % 2 == 0 ? "alice" : "bob"; }

void FuzzUpload(const uint8_t* data, size_t size) {
  Env& env = GetEnv();
  BufferStore store(kUploadQuotaBytes, kUploadPrincipalQuotaBytes);
  std::vector<Committed> committed;
  {
    int stream_index = 0;
    UploadStream stream;
    stream.principal = UploadPrincipal(stream_index);
    google::protobuf::io::CodedInputStream input(data, static_cast<int>(size));
    int messages = 0;
    while (messages < 64) {
      const uint32_t tag = input.ReadTag();
      if (tag == 0) break;
      if (tag == 0x0a) {  // field 1, length-delimited: one UploadRequest
        uint32_t length;
        if (!input.ReadVarint32(&length)) break;
        std::string bytes;
        if (!input.ReadString(&bytes, static_cast<int>(length))) break;
        v1::UploadRequest request;
        // A message that does not parse fails the call in gRPC before the reactor sees it.
        if (!request.ParseFromString(bytes)) break;
        UploadMessage(stream, request, env, store);
        ++messages;
        continue;
      }
      // Anything else: end of this stream, next one.
      if (!google::protobuf::internal::WireFormatLite::SkipField(&input, tag)) break;
      UploadEnd(stream, store, committed);
      stream = UploadStream{};
      stream.principal = UploadPrincipal(++stream_index);
    }
    UploadEnd(stream, store, committed);
  }
  // Every reservation is gone: exactly the committed bytes are in use.
  uint64_t total = 0, alice = 0;
  for (const Committed& c : committed) {
    total += c.buffer.array->bytes();
    if (c.buffer.owner == "alice") alice += c.buffer.array->bytes();
  }
  FUZZ_CHECK(store.used_bytes() == total,
             absl::StrCat("used ", store.used_bytes(), ", committed ", total));
  FUZZ_CHECK(store.used_bytes("alice") == alice, "alice's bytes");
  FUZZ_CHECK(store.count() == committed.size(), "buffer count");
  FUZZ_CHECK(store.used_bytes("alice") <= kUploadPrincipalQuotaBytes &&
                 store.used_bytes("bob") <= kUploadPrincipalQuotaBytes,
             "principal quota exceeded");
  for (const Committed& c : committed) {
    const std::string& owner = c.buffer.owner;
    const std::string other = owner == "alice" ? "bob" : "alice";
    absl::StatusOr<StoredBuffer> got = store.Get(c.buffer.id, "buffer_id", owner);
    FUZZ_CHECK(got.ok(), StatusText(got.status()));
    FUZZ_CHECK(got->array->dtype() == c.dtype && got->array->shape() == c.shape,
               "stored dtype/shape");
    std::string back(got->array->bytes(), '\0');
    absl::Status copied = env.backend->CopyFromArray(*got->array, 0, back.size(), back.data());
    FUZZ_CHECK(copied.ok(), StatusText(copied));
    FUZZ_CHECK(back == c.bytes, "downloaded bytes differ from the uploaded ones");
    FUZZ_CHECK(absl::IsNotFound(store.Get(c.buffer.id, "buffer_id", other).status()),
               "another principal can read the buffer");
    v1::BufferInfo info;
    ToBufferInfo(*got, &info);
    FUZZ_CHECK(info.id() == c.buffer.id && info.bytes() == c.bytes.size() &&
                   info.shape_size() == static_cast<int>(c.shape.size()) &&
                   info.location() == "cpu",
               info.ShortDebugString());
    FUZZ_CHECK(absl::IsNotFound(store.Delete(c.buffer.id, other).status()),
               "another principal can delete the buffer");
  }
  FUZZ_CHECK(store.List("alice").size() + store.List("bob").size() == committed.size(), "List");
  for (const Committed& c : committed) {
    absl::StatusOr<uint64_t> freed = store.Delete(c.buffer.id, c.buffer.owner);
    FUZZ_CHECK(freed.ok() && *freed == c.bytes.size(), "Delete");
  }
  FUZZ_CHECK(store.used_bytes() == 0 && store.count() == 0, "store not empty after deletes");
}

// ---------------------------------------------------------------------------
// StreamingCompute: the header's checks and one chunk through the CPU backend.

// Rows of ones (valid latitudes and longitudes, non-zero norms) of `plan`'s dtype.
std::string OnesChunk(const StreamingPlan& plan, int64_t rows) {
  const int64_t count = rows * plan.row_elements * plan.streamed_operands;
  std::string bytes(static_cast<size_t>(count) * plan.element_bytes(), '\0');
  for (int64_t i = 0; i < count; ++i) {
    if (plan.dtype == DType::kFloat32) {
      const float one = 1;
      std::memcpy(bytes.data() + i * sizeof(float), &one, sizeof(float));
    } else {
      const double one = 1;
      std::memcpy(bytes.data() + i * sizeof(double), &one, sizeof(double));
    }
  }
  return bytes;
}

// Element `i` of an operand's data (inline or stored) as a double.
double OperandElement(const OperandSpec& operand, int64_t i) {
  const char* data = operand.stored != nullptr
                         ? static_cast<const char*>(operand.stored->data())
                         : operand.tensor->data().data();
  if (operand.dtype == DType::kFloat32) {
    float v;
    std::memcpy(&v, data + i * sizeof(float), sizeof(float));
    return v;
  }
  double v;
  std::memcpy(&v, data + i * sizeof(double), sizeof(double));
  return v;
}

// Values are ones: element i of a discount chunk starting at element `first` is
// the factor that element first + i takes under broadcasting.
void CheckDiscountChunk(const StreamingPlan& plan, const Array& out, int64_t first) {
  const OperandSpec& f = *plan.factors;
  const std::vector<int64_t> strides = BroadcastStrides(f.shape, plan.shape);
  for (int64_t i = 0; i < out.size(); ++i) {
    int64_t rest = first + i;
    int64_t at = 0;
    for (size_t axis = plan.shape.size(); axis-- > 0;) {
      at += (rest % plan.shape[axis]) * strides[axis];
      rest /= plan.shape[axis];
    }
    const double expected = OperandElement(f, at);
    const double got = out.dtype() == DType::kFloat32 ? out.data_as<float>()[i]
                                                       : out.data_as<double>()[i];
    FUZZ_CHECK(got == expected || (std::isnan(expected) && std::isnan(got)),
               absl::StrCat("streamed discount element ", first + i, ": ", got, ", factor ",
                            expected));
  }
}

void FuzzStreaming(const uint8_t* data, size_t size) {
  Env& env = GetEnv();
  v1::StreamingComputeRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size)) || !request.has_header()) return;
  v1::StreamingComputeHeader& header = *request.mutable_header();
  const bool refusable = header.has_factors() && Rewrite(header.mutable_factors(), env);
  absl::StatusOr<StreamingPlan> plan = CheckStreamingHeader(header, Scope(env));
  if (!plan.ok()) {
    CheckPrepareError(plan.status(), refusable);
    return;
  }
  FUZZ_CHECK(plan->row_elements >= 1 && plan->rows >= 1 &&
                 plan->rows * plan->row_elements == Product(plan->shape),
             absl::StrCat("plan of ", ShapeToString(plan->shape), ": ", plan->rows, " rows of ",
                          plan->row_elements));
  const int64_t rows = std::min<int64_t>(plan->rows, 64);
  if (rows * plan->row_elements * plan->result_runs > (int64_t{1} << 16)) return;  // stay fast
  const uint64_t bytes = static_cast<uint64_t>(rows) * plan->row_bytes();
  absl::StatusOr<int64_t> whole = ChunkRows(*plan, bytes, 0, 2);
  FUZZ_CHECK(whole.ok() && *whole == rows, "ChunkRows refused whole rows");
  FUZZ_CHECK(!ChunkRows(*plan, bytes + 1, 0, 2).ok(), "ChunkRows took a partial row");

  std::shared_ptr<Array> factors;
  if (plan->factors.has_value()) {
    OpContext setup;
    absl::StatusOr<std::shared_ptr<Array>> placed =
        PrepareFactors(*plan, kHostDevice, *env.backend, setup);
    if (!placed.ok()) {
      FUZZ_CHECK(absl::IsResourceExhausted(placed.status()), StatusText(placed.status()));
      return;
    }
    factors = *std::move(placed);
  }
  const std::string input = OnesChunk(*plan, rows);
  const HostPiece piece{input.data(), input.size()};
  ChunkArrays arrays(*env.backend, kHostDevice, 4);
  OpContext ctx;
  ExecutionTimes times;
  // Discount product: a chunk starting inside a period of the factors.
  const int64_t first = plan->factors.has_value() ? plan->rows - rows : 0;
  absl::StatusOr<std::shared_ptr<Array>> out = RunStreamingChunk(
      *plan, factors, arrays, *env.backend, std::span(&piece, 1), first, rows, ctx, times);
  if (!out.ok()) {
    FUZZ_CHECK(absl::IsResourceExhausted(out.status()), StatusText(out.status()));
    return;
  }
  uint64_t covered = 0;
  if (plan->factors.has_value()) CheckDiscountChunk(*plan, **out, first);
  for (const ResultRun& run : ChunkResultRuns(*plan, first, rows)) {
    FUZZ_CHECK(run.source + run.bytes <= (*out)->bytes(), "a result run past the chunk's result");
    covered += run.bytes;
  }
  FUZZ_CHECK(covered == (*out)->bytes() &&
                 (*out)->size() == rows * plan->row_elements * plan->result_runs,
             "the chunk's result and its runs");
}

}  // namespace
}  // namespace gpucompute::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Invalid UTF-8 in string fields etc. would be logged for every input.
  google::protobuf::SetLogHandler(nullptr);
  gpucompute::fuzz::GetEnv();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpucompute;
  using namespace gpucompute::fuzz;
  if (size < 1 || size > (1u << 22)) return 0;
  const uint8_t* payload = data + 1;
  const size_t payload_size = size - 1;
  switch (data[0] % kTargetCount) {
    case kDiscountProduct:
      FuzzCompute<v1::DiscountProductRequest>(
          payload, payload_size, Operation::kDiscountProduct, PrepareDiscountProduct,
          [](const v1::DiscountProductRequest&, const PreparedOperation& prepared,
             const absl::StatusOr<std::shared_ptr<Array>>& out) {
            if (out.ok()) CheckDiscountProduct(prepared, **out);
          },
          nullptr);
      break;
    case kHaversineGrid:
      FuzzCompute<v1::HaversineGridRequest>(
          payload, payload_size, Operation::kHaversineGrid, PrepareHaversineGrid,
          [](const v1::HaversineGridRequest& request, const PreparedOperation& prepared,
             const absl::StatusOr<std::shared_ptr<Array>>& out) {
            if (out.ok()) CheckHaversine(request, prepared, **out);
          },
          nullptr);
      break;
    case kNormalize:
      FuzzCompute<v1::NormalizeRequest>(
          payload, payload_size, Operation::kNormalize, PrepareNormalize,
          [](const v1::NormalizeRequest& request, const PreparedOperation& prepared,
             const absl::StatusOr<std::shared_ptr<Array>>& out) {
            if (out.ok() || absl::IsInvalidArgument(out.status())) {
              CheckNormalize(request, prepared, out);
            }
          },
          nullptr);
      break;
    case kLombScargle:
      FuzzCompute<v1::LombScargleRequest>(payload, payload_size, Operation::kLombScargle,
                                          PrepareLombScargle, CheckLombScargle,
                                          LombScargleWorthRunning);
      break;
    case kUpload:
      FuzzUpload(payload, payload_size);
      break;
    case kStreaming:
      FuzzStreaming(payload, payload_size);
      break;
  }
  return 0;
}
