// Same-host zero copy through system shared memory: registration, every operand
// and result combination, limits, principal isolation and every failure the
// SharedMemory service names. GPUCOMPUTE_TEST_BACKEND=cuda runs the server tests
// on the CUDA backend (the region is then pinned and copied at PCIe speed).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/shared_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "server/shared_memory_registry.h"
#include "server/shared_memory_service.h"
#include "tests/testing/scrape.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
// A slice of a registered region as an operand.
constexpr auto* Slice = &client::SharedMemoryOperand;

// A POSIX shared-memory object this test creates, mapped; unlinked at the end.
class ShmObject {
 public:
  explicit ShmObject(size_t bytes)
      : key_(absl::StrCat("/gpucompute-test-", getpid(), "-", counter_++)), bytes_(bytes) {
    const int fd = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    data_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(data_, MAP_FAILED);
    close(fd);
  }
  ~ShmObject() {
    munmap(data_, bytes_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  void Put(size_t byte_offset, const std::vector<double>& values) {
    std::memcpy(at<double>(byte_offset), values.data(), values.size() * sizeof(double));
  }
  template <typename T>
  T* at(size_t byte_offset) {
    return reinterpret_cast<T*>(static_cast<char*>(data_) + byte_offset);
  }
  void Truncate(size_t bytes) {
    const int fd = shm_open(key_.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    close(fd);
  }

 private:
  static inline int counter_ = 0;
  std::string key_;
  size_t bytes_;
  void* data_ = nullptr;
};

bool OnCuda() {
  const char* backend = std::getenv("GPUCOMPUTE_TEST_BACKEND");
  return backend != nullptr && std::string(backend) == "cuda";
}

struct StreamOutcome {
  grpc::Status status;
  v1::ResultHeader header;
  std::string data;
  v1::ResultTrailer trailer;
  int data_chunks = 0;
};

class SharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(true); }

  void Start(bool allow) {
    server_.reset();
    ServerConfig config = test::LoopbackConfigWithMetrics();
    config.backend.kind = OnCuda() ? BackendKind::kCuda : BackendKind::kCpu;
    config.allow_shared_memory = allow;
    config.shared_memory_quota_bytes = 64 << 20;
    config.max_shared_memory_regions_per_owner = 4;
    auto server = test::TestServer::Start(config);
    // The CUDA instance (shared_memory_test_cuda) skips where no GPU is usable.
    if (OnCuda() && !server.ok()) GTEST_SKIP() << "no usable GPU: " << server.status().message();
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
    stub_ = v1::SharedMemory::NewStub(server_->channel());
  }

  absl::StatusOr<v1::SharedMemoryRegionInfo> Register(const std::string& key, uint64_t offset,
                                                      uint64_t bytes) {
    v1::RegisterSystemSharedMemoryRequest request;
    request.set_name("test region");
    request.set_key(key);
    request.set_offset(offset);
    request.set_byte_size(bytes);
    grpc::ClientContext context;
    v1::SharedMemoryRegionInfo info;
    const grpc::Status status = stub_->RegisterSystemSharedMemory(&context, request, &info);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return info;
  }

  grpc::Status Unregister(const std::string& id) {
    v1::UnregisterSharedMemoryRequest request;
    request.set_region_id(id);
    grpc::ClientContext context;
    v1::UnregisterSharedMemoryResponse response;
    return stub_->UnregisterSharedMemory(&context, request, &response);
  }

  StreamOutcome Normalize(const v1::NormalizeRequest& request) {
    grpc::ClientContext context;
    return Drain(server_->compute().Normalize(&context, request));
  }
  StreamOutcome Discount(const v1::DiscountProductRequest& request) {
    grpc::ClientContext context;
    return Drain(server_->compute().DiscountProduct(&context, request));
  }

  static StreamOutcome Drain(std::unique_ptr<grpc::ClientReader<v1::ResultChunk>> reader) {
    StreamOutcome outcome;
    v1::ResultChunk chunk;
    while (reader->Read(&chunk)) {
      if (chunk.has_header()) outcome.header = chunk.header();
      if (chunk.has_data()) {
        outcome.data += chunk.data().data();
        ++outcome.data_chunks;
      }
      if (chunk.has_trailer()) outcome.trailer = chunk.trailer();
    }
    outcome.status = reader->Finish();
    return outcome;
  }

  std::unique_ptr<test::TestServer> server_;
  std::unique_ptr<v1::SharedMemory::Stub> stub_;
};

std::vector<double> FromBytes(const std::string& bytes) {
  std::vector<double> out(bytes.size() / sizeof(double));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(double));
  return out;
}

TEST_F(SharedMemoryTest, OperandFromRegionStreamsTheResult) {
  ShmObject shm(1 << 20);
  test::RandomInputs random;
  SCOPED_TRACE(random.seed());
  const std::vector<double> rows = random.Uniform(3 * 1000, 0.5, 2.0);
  shm.Put(4096, rows);
  auto region = Register(shm.key(), 0, 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status().message();
  EXPECT_EQ(region->byte_size(), 1u << 20);
  EXPECT_EQ(region->kind(), v1::SHARED_MEMORY_SYSTEM);

  v1::NormalizeRequest request;
  *request.mutable_input() = Slice(region->id(), 4096, v1::FLOAT64, {3, 1000});
  const StreamOutcome out = Normalize(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  test::ExpectNear(FromBytes(out.data), test::NormalizeRows(rows, 1000, NormKind::kSum), 1e-13, 0);
  EXPECT_TRUE(out.trailer.shared_memory_region_id().empty());
}

TEST_F(SharedMemoryTest, ResultIntoRegionIsNotStreamed) {
  ShmObject shm(1 << 20);
  test::RandomInputs random;
  SCOPED_TRACE(random.seed());
  const std::vector<double> rows = random.Uniform(4 * 256, 0.5, 2.0);
  auto region = Register(shm.key(), 0, 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status().message();

  for (const uint64_t out_offset : {uint64_t{65536}, uint64_t{0}}) {  // apart, then in place
    SCOPED_TRACE(out_offset);
    shm.Put(0, rows);
    v1::NormalizeRequest request;
    *request.mutable_input() = Slice(region->id(), 0, v1::FLOAT64, {4, 256});
    request.set_norm(v1::NORM_L2);
    v1::SharedMemorySlice* output = request.mutable_output()->mutable_shared_memory();
    output->set_region_id(region->id());
    output->set_offset(out_offset);
    const StreamOutcome out = Normalize(request);
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.data_chunks, 0);
    EXPECT_EQ(out.header.total_bytes(), rows.size() * sizeof(double));
    EXPECT_EQ(out.trailer.shared_memory_region_id(), region->id());
    const double* result = shm.at<double>(out_offset);
    test::ExpectNear(std::vector<double>(result, result + rows.size()),
                     test::NormalizeRows(rows, 256, NormKind::kL2), 1e-13, 0);
  }
}

TEST_F(SharedMemoryTest, EveryOperandSourceMixesWithRegions) {
  ShmObject shm(1 << 20);
  test::RandomInputs random;
  SCOPED_TRACE(random.seed());
  const Shape factors_shape = {40, 5};
  const Shape values_shape = {10, 40, 5};
  const std::vector<double> factors = random.Uniform(200, 0.5, 1.0);
  const std::vector<double> values = random.Uniform(2000, -5, 5);
  shm.Put(0, factors);
  shm.Put(8192, values);
  auto region = Register(shm.key(), 0, 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status().message();
  auto stored = server_->client().Upload("values", test::F64(values, values_shape));
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  const std::vector<double> expected =
      test::BroadcastProduct(factors, factors_shape, values, values_shape, values_shape);

  const v1::Operand factor_sources[] = {test::Operand(test::F64(factors, factors_shape)),
                                        Slice(region->id(), 0, v1::FLOAT64, factors_shape)};
  v1::Operand stored_values;
  stored_values.set_buffer_id(stored->id());
  const v1::Operand value_sources[] = {Slice(region->id(), 8192, v1::FLOAT64, values_shape),
                                       stored_values,
                                       test::Operand(test::F64(values, values_shape))};
  for (const v1::Operand& f : factor_sources) {
    for (const v1::Operand& v : value_sources) {
      for (const bool into_region : {false, true}) {
        SCOPED_TRACE(absl::StrCat(f.source_case(), " x ", v.source_case(), " into region ",
                                  into_region));
        v1::DiscountProductRequest request;
        *request.mutable_factors() = f;
        *request.mutable_values() = v;
        if (into_region) {
          std::memset(shm.at<double>(65536), 0xff, expected.size() * sizeof(double));
          v1::SharedMemorySlice* output = request.mutable_output()->mutable_shared_memory();
          output->set_region_id(region->id());
          output->set_offset(65536);
          output->set_dtype(v1::FLOAT64);
          for (int64_t extent : values_shape) output->add_shape(extent);
        }
        const StreamOutcome out = Discount(request);
        ASSERT_TRUE(out.status.ok()) << out.status.error_message();
        const double* in_region = shm.at<double>(65536);
        test::ExpectNear(into_region ? std::vector<double>(in_region, in_region + expected.size())
                                     : FromBytes(out.data),
                         expected, 1e-15, 0);
      }
    }
  }
}

TEST_F(SharedMemoryTest, StatusListsTheCallersRegionsAndUnregisterFreesThem) {
  ShmObject shm(8192);
  auto a = Register(shm.key(), 0, 4096);
  auto b = Register(shm.key(), 4096, 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  v1::SharedMemoryStatusResponse status;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->SharedMemoryStatus(&context, {}, &status).ok());
  }
  ASSERT_EQ(status.regions_size(), 2);
  EXPECT_EQ(status.regions(0).id(), a->id());
  EXPECT_EQ(status.used_bytes(), 8192u);
  EXPECT_EQ(status.quota_bytes(), 64u << 20);
  const std::string metrics = test::ScrapeMetricsBody(server_->server().metrics_port());
  EXPECT_THAT(metrics, HasSubstr("gpucompute_shared_memory_regions 2\n"));
  EXPECT_THAT(metrics, HasSubstr("gpucompute_shared_memory_bytes 8192\n"));
  ASSERT_TRUE(Unregister(a->id()).ok());
  EXPECT_EQ(Unregister(a->id()).error_code(), grpc::NOT_FOUND);
  v1::NormalizeRequest request;
  *request.mutable_input() = Slice(a->id(), 0, v1::FLOAT64, {2});
  const StreamOutcome out = Normalize(request);
  EXPECT_EQ(out.status.error_code(), grpc::NOT_FOUND);
  EXPECT_THAT(out.status.error_message(), HasSubstr("input.shared_memory.region_id"));
}

TEST_F(SharedMemoryTest, RegistrationFailuresAreNamed) {
  ShmObject shm(8192);
  auto missing = Register("/gpucompute-test-no-such-object", 0, 4096);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("server's host"));
  auto too_big = Register(shm.key(), 4096, 8192);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.status().message(), HasSubstr("8192 bytes"));
  EXPECT_EQ(Register("no-slash", 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Register("/a/b", 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Register(shm.key(), 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  auto over_quota = Register(shm.key(), 0, 65ull << 20);
  EXPECT_EQ(over_quota.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over_quota.status().message(), HasSubstr("--shared_memory_quota_bytes"));
  v1::RegisterCudaSharedMemoryRequest cuda;
  cuda.set_ipc_handle(std::string(64, '\0'));
  cuda.set_byte_size(64);
  grpc::ClientContext context;
  v1::SharedMemoryRegionInfo info;
  const grpc::Status cuda_status = stub_->RegisterCudaSharedMemory(&context, cuda, &info);
  if (!OnCuda()) {
    EXPECT_EQ(cuda_status.error_code(), grpc::FAILED_PRECONDITION);
    EXPECT_THAT(cuda_status.error_message(), HasSubstr("CUDA IPC"));
  } else {
    EXPECT_FALSE(cuda_status.ok());
  }
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Register(shm.key(), 0, 64).ok());
  auto fifth = Register(shm.key(), 0, 64);
  EXPECT_EQ(fifth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(fifth.status().message(), HasSubstr("--max_shared_memory_regions_per_owner"));

}

TEST_F(SharedMemoryTest, SlicesOutsideTheRegionOrMisalignedAreRefused) {
  ShmObject shm(8192);
  auto region = Register(shm.key(), 0, 4096);
  ASSERT_TRUE(region.ok()) << region.status().message();
  struct Case {
    uint64_t offset;
    Shape shape;
    const char* message;
  } cases[] = {{0, {513}, "past the region's end"},
               {4096, {1}, "past the region's end"},
               {4, {2}, "not aligned"},
               {0, {-1}, "input.shared_memory"}};
  for (const Case& c : cases) {
    v1::NormalizeRequest request;
    *request.mutable_input() = Slice(region->id(), c.offset, v1::FLOAT64, c.shape);
    const StreamOutcome out = Normalize(request);
    EXPECT_EQ(out.status.error_code(), grpc::INVALID_ARGUMENT) << c.message;
    EXPECT_THAT(out.status.error_message(), HasSubstr(c.message));
  }
  for (auto [field, value] : {std::pair<const char*, int>{"dtype", 0}, {"shape", 1}}) {
    v1::NormalizeRequest request;
    *request.mutable_input() = Slice(region->id(), 0, v1::FLOAT64, {4, 4});
    v1::SharedMemorySlice* output = request.mutable_output()->mutable_shared_memory();
    output->set_region_id(region->id());
    if (value == 0) output->set_dtype(v1::FLOAT32);
    if (value == 1) output->add_shape(16);
    const StreamOutcome out = Normalize(request);
    EXPECT_EQ(out.status.error_code(), grpc::INVALID_ARGUMENT);
    EXPECT_THAT(out.status.error_message(),
                HasSubstr(absl::StrCat("output.shared_memory.", field)));
  }
  v1::NormalizeRequest both;
  *both.mutable_input() = Slice(region->id(), 0, v1::FLOAT64, {4});
  both.mutable_output()->set_keep_on_device(true);
  both.mutable_output()->mutable_shared_memory()->set_region_id(region->id());
  EXPECT_EQ(Normalize(both).status.error_code(), grpc::INVALID_ARGUMENT);
}

TEST_F(SharedMemoryTest, ShrunkOrUnlinkedObjectsFailTheRequestNotTheServer) {
  auto shm = std::make_unique<ShmObject>(8192);
  for (int i = 0; i < 8; ++i) *shm->at<double>(i * 8) = 1.0 + i;
  auto region = Register(shm->key(), 0, 8192);
  ASSERT_TRUE(region.ok()) << region.status().message();
  v1::NormalizeRequest request;
  *request.mutable_input() = Slice(region->id(), 0, v1::FLOAT64, {8});
  ASSERT_TRUE(Normalize(request).status.ok());

  shm->Truncate(4096);
  StreamOutcome out = Normalize(request);
  EXPECT_EQ(out.status.error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_THAT(out.status.error_message(), HasSubstr("shrank to 4096 bytes"));

  shm.reset();  // unlinks it, as when the process that made it ends
  out = Normalize(request);
  EXPECT_EQ(out.status.error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_THAT(out.status.error_message(), HasSubstr("was unlinked"));
  // The next registration drops the orphan: it no longer holds pinned memory or quota.
  ShmObject other(4096);
  ASSERT_TRUE(Register(other.key(), 0, 4096).ok());
  EXPECT_EQ(Unregister(region->id()).error_code(), grpc::NOT_FOUND);
}

// Sizes no object can have and keys that name directories are invalid
// arguments; a region whose object was unlinked is neither listed nor counted.
TEST_F(SharedMemoryTest, ImpossibleRegistrationsAreInvalidAndUnlinkedRegionsAreNotListed) {
  auto shm = std::make_unique<ShmObject>(8192);
  const absl::Status huge = Register(shm->key(), 0, UINT64_MAX).status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument) << huge.message();
  EXPECT_THAT(huge.message(), HasSubstr("byte_size"));
  for (const char* key : {"/.", "/.."}) {
    const absl::Status directory = Register(key, 0, 64).status();
    EXPECT_EQ(directory.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(directory.message(), HasSubstr("names a directory")) << key;
  }
  ASSERT_TRUE(Register(shm->key(), 0, 8192).ok());
  shm.reset();  // unlinked
  v1::SharedMemoryStatusResponse status;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->SharedMemoryStatus(&context, {}, &status).ok());
  EXPECT_EQ(status.regions_size(), 0);
  EXPECT_EQ(status.used_bytes(), 0u);
}

TEST_F(SharedMemoryTest, OffByDefault) {
  Start(false);
  ShmObject shm(4096);
  auto region = Register(shm.key(), 0, 4096);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(region.status().message(), HasSubstr("--allow_shared_memory"));
  v1::NormalizeRequest request;
  *request.mutable_input() = Slice("0123456789abcdef0123456789abcdef", 0, v1::FLOAT64, {2});
  const StreamOutcome out = Normalize(request);
  EXPECT_EQ(out.status.error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_THAT(out.status.error_message(), HasSubstr("input.shared_memory: shared memory is off"));
  auto info = server_->client().GetInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->limits().shared_memory());
  EXPECT_EQ(info->limits().shared_memory_quota_bytes(), 64u << 20);
  EXPECT_EQ(info->limits().max_shared_memory_regions_per_owner(), 4u);
  EXPECT_FALSE(info->host_boot_id().empty());
}

// The C++ client's SharedRegion: operand and result in one region it owns.
TEST_F(SharedMemoryTest, ClientSharedRegionCarriesOperandAndResult) {
  client::Client& client = server_->client();
  std::string id;
  {
    auto region = client::SharedRegion::Create(client, 2 * 6 * sizeof(double), "client test");
    ASSERT_TRUE(region.ok()) << region.status().message();
    id = (*region)->id();
    const double rows[] = {1, 2, 5, 4, 4, 2};
    std::memcpy((*region)->data(), rows, sizeof(rows));
    v1::NormalizeRequest request;
    *request.mutable_input() = (*region)->Operand(0, v1::FLOAT64, {2, 3});
    *request.mutable_output()->mutable_shared_memory() = (*region)->Output(sizeof(rows));
    absl::StatusOr<client::Result> result = client.Normalize(request);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_TRUE(result->data.empty());
    EXPECT_EQ(result->trailer.shared_memory_region_id(), id);
    const double* out = reinterpret_cast<const double*>((*region)->data() + sizeof(rows));
    EXPECT_THAT(std::vector<double>(out, out + 6),
                ::testing::ElementsAre(0.125, 0.25, 0.625, 0.4, 0.4, 0.2));
  }
  EXPECT_EQ(Unregister(id).error_code(), grpc::NOT_FOUND);  // unregistered with the region
}

TEST(IsLocalPeerTest, LoopbackAndUnixSocketsOnly) {
  for (const char* peer : {"ipv4:127.0.0.1:5000", "ipv4:127.8.0.1:1", "ipv6:[::1]:5000",
                           "ipv6:%5B::1%5D:5000", "ipv6:[::ffff:127.0.0.1]:80", "unix:/run/s",
                           "unix-abstract:gc"}) {
    EXPECT_TRUE(IsLocalPeer(peer)) << peer;
  }
  for (const char* peer : {"ipv4:10.0.0.1:5000", "ipv6:[2001:db8::1]:5000", "ipv6:[::1a]:1",
                           "ipv4:128.0.0.1:1", ""}) {
    EXPECT_FALSE(IsLocalPeer(peer)) << peer;
  }
}

// The registry directly: principals, keys, and waiting for the last user.
TEST(SharedMemoryRegistryTest, RegionsBelongToTheirPrincipal) {
  ShmObject shm(8192);
  std::unique_ptr<Backend> backend = std::move(CreateBackend({.kind = BackendKind::kCpu})->backend);
  SharedMemoryRegistry registry({1 << 20, 8192, 0}, NewInstanceId());
  auto mapped = SharedMemoryRegion::MapSystem(*backend, shm.key(), 0, 8192, getuid());
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  auto added = registry.Add({.owner = "alice", .key = shm.key(), .region = *mapped});
  ASSERT_TRUE(added.ok()) << added.status().message();
  EXPECT_EQ(registry.Get(added->id, "x", "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Remove(added->id, "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.List("bob").empty());
  const absl::Status bob = registry.CheckRoom("bob", 64, shm.key());
  EXPECT_EQ(bob.code(), absl::StatusCode::kPermissionDenied) << bob.message();
  EXPECT_EQ(registry.CheckRoom("alice", 1, "").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(registry.CheckRoom("bob", 8192, "").ok());

  // Unregistering while a request holds a view: released when the view goes.
  auto view = (*mapped)->View(DType::kFloat64, {4}, 0, 1 << 20, "input");
  ASSERT_TRUE(view.ok());
  auto removed = registry.Remove(added->id, "alice");
  ASSERT_TRUE(removed.ok());
  bool released = false;
  (*removed)->WhenReleased([&] { released = true; });
  removed->reset();
  mapped->reset();
  added->region.reset();
  EXPECT_FALSE(released);
  view->reset();
  EXPECT_TRUE(released);
  EXPECT_EQ(registry.used_bytes("alice"), 0u);
}

// A shrink that races the size check: the access reads zeros, the server lives.
TEST(SharedMemoryRegionTest, SigbusInsideARegionIsContained) {
  ShmObject shm(1 << 16);
  std::unique_ptr<Backend> backend = std::move(CreateBackend({.kind = BackendKind::kCpu})->backend);
  auto region = SharedMemoryRegion::MapSystem(*backend, shm.key(), 0, 1 << 16, getuid());
  ASSERT_TRUE(region.ok()) << region.status().message();
  auto view = (*region)->View(DType::kFloat64, {8192}, 0, 1 << 20, "input");
  ASSERT_TRUE(view.ok());
  shm.Truncate(0);
  const volatile double* data = static_cast<const double*>((*view)->data());
  EXPECT_EQ(data[4096], 0.0);  // past the end of the object: SIGBUS, contained
  const absl::Status usable = (*region)->CheckUsable("input");
  EXPECT_EQ(usable.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(usable.message(), HasSubstr("shrunk"));
}

}  // namespace
}  // namespace gpucompute
