// CUDA IPC regions on a real GPU: device memory of another process (this test
// binary started again as an exporter) registered by its IPC handle, used as an
// operand and as the place of a result, and every refusal: a handle too small for
// the region, a GPU the server does not have, a malformed handle, the memory of a
// process that has ended. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_fixture.h"

extern char** environ;

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

constexpr char kExporterEnv[] = "GPUCOMPUTE_TEST_IPC_EXPORTER";
constexpr int kRows = 4;
constexpr int kCols = 1000;
constexpr size_t kAllocationBytes = 1 << 20;

// The exporter: allocates device memory holding rows i + 1 (each row constant), prints
// its IPC handle (hex), PCI bus id and size, and frees it when stdin closes.
int RunExporter() {
  void* memory = nullptr;
  if (cudaMalloc(&memory, kAllocationBytes) != cudaSuccess) return 3;
  std::vector<double> rows(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i) rows[i] = 1 + i / kCols;
  cudaMemcpy(memory, rows.data(), rows.size() * sizeof(double), cudaMemcpyHostToDevice);
  cudaIpcMemHandle_t handle;
  char bus[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (cudaIpcGetMemHandle(&handle, memory) != cudaSuccess ||
      cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess) {
    return 4;
  }
  for (size_t i = 0; i < sizeof(handle); ++i) {
    std::printf("%02x", static_cast<unsigned char>(handle.reserved[i]));
  }
  std::printf(" %s %zu\n", bus, kAllocationBytes);
  std::fflush(stdout);
  char line[16];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
  }
  cudaFree(memory);
  return 0;
}

// Runs before main in the exporter process, which is this binary started again.
const bool kIsExporter = [] {
  if (std::getenv(kExporterEnv) != nullptr) std::exit(RunExporter());
  return false;
}();

// An exporter process: its handle, bus id and size; ends when Stop() or destroyed.
class Exporter {
 public:
  Exporter() {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, to_child[1]);
    posix_spawn_file_actions_addclose(&actions, from_child[0]);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    env_strings.push_back(absl::StrCat(kExporterEnv, "=1"));
    std::vector<char*> env;
    for (std::string& s : env_strings) env.push_back(s.data());
    env.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char* argv[] = {self, nullptr};
    const bool spawned = posix_spawn(&pid_, self, &actions, nullptr, argv, env.data()) == 0;
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    stdin_ = to_child[1];
    FILE* out = fdopen(from_child[0], "r");
    char hex[129] = {}, bus[65] = {};
    size_t bytes = 0;
    if (spawned && out != nullptr && std::fscanf(out, "%128s %64s %zu", hex, bus, &bytes) == 3) {
      for (int i = 0; i < 64; ++i) {
        handle_.push_back(static_cast<char>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16)));
      }
      bus_ = bus;
      bytes_ = bytes;
    }
    if (out != nullptr) std::fclose(out);
  }
  ~Exporter() { Stop(); }

  // Closes its stdin: it frees the memory and exits.
  void Stop() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool ok() const { return handle_.size() == 64; }
  const std::string& handle() const { return handle_; }
  const std::string& bus() const { return bus_; }
  size_t bytes() const { return bytes_; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  std::string handle_, bus_;
  size_t bytes_ = 0;
};

class GpuSharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    ServerConfig config = test::LoopbackConfig();
    config.backend.kind = BackendKind::kCuda;
    config.allow_shared_memory = true;
    auto server = test::TestServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
    stub_ = v1::SharedMemory::NewStub(server_->channel());
    ASSERT_TRUE(exporter_.ok()) << "the exporter process made no IPC handle";
  }

  grpc::Status Register(const std::string& handle, const std::string& bus, uint64_t bytes,
                        v1::SharedMemoryRegionInfo* info) {
    v1::RegisterCudaSharedMemoryRequest request;
    request.set_ipc_handle(handle);
    request.set_pci_bus_id(bus);
    request.set_byte_size(bytes);
    grpc::ClientContext context;
    return stub_->RegisterCudaSharedMemory(&context, request, info);
  }

  Exporter exporter_;
  std::unique_ptr<test::TestServer> server_;
  std::unique_ptr<v1::SharedMemory::Stub> stub_;
};

v1::Operand Rows(const std::string& region, uint64_t offset) {
  v1::Operand operand;
  v1::SharedMemorySlice* slice = operand.mutable_shared_memory();
  slice->set_region_id(region);
  slice->set_offset(offset);
  slice->set_dtype(v1::FLOAT64);
  slice->add_shape(kRows);
  slice->add_shape(kCols);
  return operand;
}

TEST_F(GpuSharedMemoryTest, OperandAndResultInAnotherProcesssDeviceMemory) {
  v1::SharedMemoryRegionInfo info;
  const grpc::Status registered =
      Register(exporter_.handle(), exporter_.bus(), exporter_.bytes(), &info);
  ASSERT_TRUE(registered.ok()) << registered.error_message();
  EXPECT_THAT(info.location(), HasSubstr("cuda:"));

  // Rows i + 1 normalized by their max into the region, after the rows.
  const uint64_t out_offset = kRows * kCols * sizeof(double);
  v1::NormalizeRequest request;
  *request.mutable_input() = Rows(info.id(), 0);
  request.set_norm(v1::NORM_MAX_ABS);
  request.mutable_output()->mutable_shared_memory()->set_region_id(info.id());
  request.mutable_output()->mutable_shared_memory()->set_offset(out_offset);
  absl::StatusOr<client::Result> written = server_->client().Normalize(request);
  ASSERT_TRUE(written.ok()) << written.status().message();
  EXPECT_TRUE(written->data.empty());
  EXPECT_EQ(written->trailer.timing().transfer_in_us(), 0u);  // read in place on the GPU

  // Streamed back from the region: every element 1; and the input row sums.
  v1::NormalizeRequest readback;
  *readback.mutable_input() = Rows(info.id(), out_offset);
  readback.set_norm(v1::NORM_MAX_ABS);
  absl::StatusOr<client::Result> ones = server_->client().Normalize(readback);
  ASSERT_TRUE(ones.ok()) << ones.status().message();
  EXPECT_THAT(*ones->AsDoubles(), ::testing::Each(1.0));
  *readback.mutable_input() = Rows(info.id(), 0);
  readback.set_norm(v1::NORM_SUM);
  absl::StatusOr<client::Result> sums = server_->client().Normalize(readback);
  ASSERT_TRUE(sums.ok()) << sums.status().message();
  EXPECT_THAT(*sums->AsDoubles(), ::testing::Each(::testing::DoubleNear(1.0 / kCols, 1e-15)));
}

TEST_F(GpuSharedMemoryTest, RefusalsAreNamed) {
  v1::SharedMemoryRegionInfo info;
  grpc::Status status = Register(exporter_.handle(), exporter_.bus(), exporter_.bytes() + 1, &info);
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("passes the end of the IPC handle's allocation"));

  status = Register(exporter_.handle(), "0000:FF:1F.7", 64, &info);
  EXPECT_EQ(status.error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("names no GPU this server sees"));

  status = Register("short", exporter_.bus(), 64, &info);
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("ipc_handle has 5 bytes"));

  // The exporting process ends: its memory is gone.
  exporter_.Stop();
  status = Register(exporter_.handle(), exporter_.bus(), 64, &info);
  EXPECT_EQ(status.error_code(), grpc::NOT_FOUND) << status.error_message();
  EXPECT_TRUE(server_->server().BackendHealthy());
}

}  // namespace
}  // namespace gpucompute
