// gpucompute-cli end to end against an in-process server (CPU backend): what a
// script captures from stdout and what goes to stderr, and .npy files in the
// layouts the Python client accepts (big-endian, Fortran order).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/server_fixture.h"

namespace gpucompute {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig config = test::LoopbackConfig();
    config.allow_shared_memory = true;
    absl::StatusOr<std::unique_ptr<test::TestServer>> server = test::TestServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("client_cli_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string PathOf(absl::string_view name) const { return (dir_ / std::string(name)).string(); }

  // Runs gpucompute-cli against the server with stdout and stderr captured
  // apart, as ID=$(gpucompute-cli ...) in a shell would see them. With
  // `target_from_environment` the server is named by GPUCOMPUTE_TARGET instead
  // of --target.
  CliRun Cli(std::vector<std::string> args, bool target_from_environment = false) const {
    args.insert(args.begin(), "--timeout=30s");
    if (!target_from_environment) {
      args.insert(args.begin(), absl::StrCat("--target=", server_->target()));
    }
    args.insert(args.begin(), GPUCOMPUTE_CLI_PATH);
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::string target_variable = absl::StrCat("GPUCOMPUTE_TARGET=", server_->target());
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!absl::StartsWith(*e, "GPUCOMPUTE_TARGET=")) env.push_back(*e);
    }
    if (target_from_environment) env.push_back(target_variable.data());
    env.push_back(nullptr);
    const std::string out_path = PathOf("cli.stdout"), err_path = PathOf("cli.stderr");
    // Between fork and exec only async-signal-safe calls: this process has threads.
    const pid_t pid = fork();
    if (pid == 0) {
      const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out < 0 || err < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) {
        _exit(126);
      }
      execve(GPUCOMPUTE_CLI_PATH, argv.data(), env.data());
      _exit(127);
    }
    CliRun run;
    int status = 0;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
      run.exit_code = WEXITSTATUS(status);
    }
    run.out = ReadAll(out_path);
    run.err = ReadAll(err_path);
    return run;
  }

  // The one stored buffer's id, as the server lists it.
  std::string OnlyBufferId() const {
    absl::StatusOr<v1::ListResponse> list = server_->client().List();
    EXPECT_TRUE(list.ok()) << list.status().message();
    EXPECT_EQ(list->buffers_size(), 1);
    return list->buffers_size() == 1 ? list->buffers(0).id() : "";
  }

  std::vector<double> Download(const std::string& id) const {
    absl::StatusOr<client::Result> result = server_->client().Download(id);
    EXPECT_TRUE(result.ok()) << result.status().message();
    if (!result.ok()) return {};
    std::vector<double> values(result->data.size() / sizeof(double));
    std::memcpy(values.data(), result->data.data(), result->data.size());
    return values;
  }

  std::unique_ptr<test::TestServer> server_;
  std::filesystem::path dir_;
};

// A version 1.0 .npy file with `header` (padded here) and `data`, as a writer
// other than this client's would produce it.
void WriteNpyWithHeader(const std::string& path, std::string header, absl::string_view data) {
  header.append(63 - (10 + header.size()) % 64, ' ');
  header.push_back('\n');
  std::ofstream(path, std::ios::binary)
      << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(header.size()) << '\0' << header
      << data;
}

// Rows [1, 2, 5] and [4, 4, 2], as float64 (2, 3).
void WriteRows(const std::string& path) {
  const std::vector<double> rows = {1, 2, 5, 4, 4, 2};
  const std::vector<int64_t> shape = {2, 3};
  const absl::Status written = client::WriteNpyFile(
      path, v1::FLOAT64, shape,
      absl::string_view(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(double)));
  ASSERT_TRUE(written.ok()) << written.message();
}

// The README's first call: ID=$(gpucompute-cli upload data.npy), then buffer:$ID.
TEST_F(CliTest, UploadPrintsTheIdAloneOnStdout) {
  WriteRows(PathOf("data.npy"));
  const CliRun upload = Cli({"upload", PathOf("data.npy"), "--name=data"});
  ASSERT_EQ(upload.exit_code, 0) << upload.err;
  const std::string id = OnlyBufferId();
  EXPECT_EQ(upload.out, id + "\n");
  EXPECT_THAT(upload.err, HasSubstr(id));  // the human-readable table
  EXPECT_THAT(upload.err, HasSubstr("data"));

  const CliRun normalize = Cli({"normalize", absl::StrCat("--input=buffer:", id),
                                absl::StrCat("--out=", PathOf("normalized.npy"))});
  ASSERT_EQ(normalize.exit_code, 0) << normalize.err;
  absl::StatusOr<client::NpyArray> normalized = client::ReadNpyFile(PathOf("normalized.npy"));
  ASSERT_TRUE(normalized.ok()) << normalized.status().message();
  std::vector<double> values(6);
  std::memcpy(values.data(), normalized->data.data(), normalized->data.size());
  EXPECT_THAT(values, ElementsAre(0.125, 0.25, 0.625, 0.4, 0.4, 0.2));
}

// `stream` runs an operation as StreamingCompute between mapped .npy files; a
// failed stream leaves no output file.
TEST_F(CliTest, StreamWritesTheResultFileAndLeavesNoneOnFailure) {
  WriteRows(PathOf("data.npy"));
  const CliRun stream = Cli({"stream", "normalize", absl::StrCat("--input=", PathOf("data.npy")),
                             absl::StrCat("--out=", PathOf("streamed.npy"))});
  ASSERT_EQ(stream.exit_code, 0) << stream.err;
  EXPECT_THAT(stream.out, HasSubstr("streamed    1 chunks"));
  absl::StatusOr<client::NpyArray> streamed = client::ReadNpyFile(PathOf("streamed.npy"));
  ASSERT_TRUE(streamed.ok()) << streamed.status().message();
  std::vector<double> values(6);
  std::memcpy(values.data(), streamed->data.data(), streamed->data.size());
  EXPECT_THAT(values, ElementsAre(0.125, 0.25, 0.625, 0.4, 0.4, 0.2));

  // Factors (2,) do not broadcast against values (2, 3).
  const double two[] = {1, 2};
  const std::vector<int64_t> two_shape = {2};
  ASSERT_TRUE(client::WriteNpyFile(PathOf("factors.npy"), v1::FLOAT64, two_shape,
                                   absl::string_view(reinterpret_cast<const char*>(two),
                                                     sizeof(two)))
                  .ok());
  const CliRun refused =
      Cli({"stream", "discount-product", absl::StrCat("--factors=", PathOf("factors.npy")),
           absl::StrCat("--values=", PathOf("data.npy")),
           absl::StrCat("--out=", PathOf("refused.npy"))});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("header.factors.shape (2,) and header.shape (2, 3) do not"));
  EXPECT_FALSE(std::filesystem::exists(PathOf("refused.npy")));
}

// --stripes: upload, download and stream over three connections, byte for byte
// what one stream gives.
TEST_F(CliTest, StripedTransfersAndStreamsAreByteExact) {
  const int64_t rows = 600, columns = 50;
  std::vector<double> data(rows * columns);
  for (size_t i = 0; i < data.size(); ++i) data[i] = 1.0 + static_cast<double>(i % 977) / 7;
  const std::vector<int64_t> shape = {rows, columns};
  const absl::string_view bytes(reinterpret_cast<const char*>(data.data()),
                                data.size() * sizeof(double));
  ASSERT_TRUE(client::WriteNpyFile(PathOf("data.npy"), v1::FLOAT64, shape, bytes).ok());
  const std::vector<std::string> striped = {"--stripes=3", "--stripe_bytes=16384"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), striped.begin(), striped.end());
    return args;
  };
  const CliRun upload = Cli(with({"upload", PathOf("data.npy")}));
  ASSERT_EQ(upload.exit_code, 0) << upload.err;
  const std::string id = OnlyBufferId();
  const CliRun download = Cli(with({"download", id, PathOf("back.npy")}));
  ASSERT_EQ(download.exit_code, 0) << download.err;
  absl::StatusOr<client::NpyArray> back = client::ReadNpyFile(PathOf("back.npy"));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->data == bytes);

  const CliRun one = Cli({"stream", "normalize", absl::StrCat("--input=", PathOf("data.npy")),
                          absl::StrCat("--out=", PathOf("one.npy"))});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const CliRun three =
      Cli(with({"stream", "normalize", absl::StrCat("--input=", PathOf("data.npy")),
                absl::StrCat("--out=", PathOf("three.npy"))}));
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_EQ(ReadAll(PathOf("three.npy")), ReadAll(PathOf("one.npy")));
  EXPECT_THAT(Cli({"list", "--stripes=0"}).err, HasSubstr("--stripes 0 and --stripe_bytes"));
}

TEST_F(CliTest, KeepOnDevicePrintsTheStoredIdAloneOnStdout) {
  WriteRows(PathOf("data.npy"));
  const CliRun kept = Cli({"normalize", absl::StrCat("--input=", PathOf("data.npy")),
                           "--keep_on_device", "--name=kept"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  const std::string id = OnlyBufferId();
  EXPECT_EQ(kept.out, id + "\n");
  EXPECT_THAT(kept.err, HasSubstr("stored buffer"));
  EXPECT_THAT(kept.err, HasSubstr("total"));  // the timing breakdown
  EXPECT_THAT(Download(id), ElementsAre(0.125, 0.25, 0.625, 0.4, 0.4, 0.2));
}

// The instance id names the replica that `info` reached: buffer ids begin with it.
TEST_F(CliTest, InfoShowsTheInstanceId) {
  const CliRun info = Cli({"info"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr(absl::StrCat("instance    ", server_->server().instance_id(), "\n")));
}

TEST_F(CliTest, VersionNamesTheReleaseCommitCudaAndGrpc) {
  const CliRun version = Cli({"--version"});
  ASSERT_EQ(version.exit_code, 0) << version.err;
  EXPECT_THAT(version.out, HasSubstr("gpucompute-cli 0.1.0\n"));
  EXPECT_THAT(version.out, HasSubstr("git commit: "));
  EXPECT_THAT(version.out, HasSubstr("architectures "));
  EXPECT_THAT(version.out, HasSubstr("gRPC: 1."));
}

TEST_F(CliTest, InfoAndListAsJson) {
  const CliRun info = Cli({"info", "--format=json"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  v1::ServerInfo parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(info.out, &parsed).ok()) << info.out;
  EXPECT_EQ(parsed.instance_id(), server_->server().instance_id());
  EXPECT_THAT(info.out, HasSubstr("\"instance_id\""));  // the .proto's field names
  const std::string rows = PathOf("rows.npy");
  WriteRows(rows);
  ASSERT_EQ(Cli({"upload", rows}).exit_code, 0);
  const CliRun list = Cli({"list", "--format=json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  v1::ListResponse listed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(list.out, &listed).ok()) << list.out;
  ASSERT_EQ(listed.buffers_size(), 1);
  EXPECT_EQ(listed.buffers(0).id(), OnlyBufferId());
  EXPECT_EQ(Cli({"info", "--format=yaml"}).exit_code, 2);
}

TEST_F(CliTest, SubcommandHelpShowsThatSubcommandsFlags) {
  const CliRun help = Cli({"normalize", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  EXPECT_THAT(help.out, HasSubstr("--input"));
  EXPECT_THAT(help.out, HasSubstr("--target"));
  EXPECT_THAT(help.out, ::testing::Not(HasSubstr("--factors")));
}

TEST_F(CliTest, DurationsTakeBareSecondsOrNameTheUnit) {
  const CliRun seconds = Cli({"bench", "--duration=0.2", "--concurrency=1", "--mix=health:1"});
  EXPECT_EQ(seconds.exit_code, 0) << seconds.err;
  const CliRun bad = Cli({"bench", "--duration=soon"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("500ms, 30s"));
}

TEST_F(CliTest, TargetFromTheEnvironment) {
  const CliRun info = Cli({"info"}, /*target_from_environment=*/true);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr(server_->server().instance_id()));
}

// Without a stored buffer there is nothing to capture: the report is the output.
TEST_F(CliTest, ComputeReportStaysOnStdout) {
  WriteRows(PathOf("data.npy"));
  const CliRun run = Cli({"normalize", absl::StrCat("--input=", PathOf("data.npy"))});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("values      [0.125, 0.25, 0.625, 0.4, 0.4, 0.2]"));
  EXPECT_THAT(run.out, HasSubstr("total"));
}

// Same host: the file is read into a shared-memory region, unregistered afterwards.
TEST_F(CliTest, SharedMemoryOperandsSkipTheWire) {
  WriteRows(PathOf("data.npy"));
  const CliRun run = Cli({"normalize", absl::StrCat("--input=", PathOf("data.npy")),
                          "--shared_memory"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("values      [0.125, 0.25, 0.625, 0.4, 0.4, 0.2]"));
  EXPECT_THAT(run.out, HasSubstr("transfer in 0,"));  // the CPU backend reads the region
  absl::StatusOr<v1::SharedMemoryStatusResponse> status =
      server_->client().SharedMemoryStatus();
  ASSERT_TRUE(status.ok()) << status.status().message();
  EXPECT_EQ(status->regions_size(), 0);
}

// A big-endian, Fortran-ordered (2, 3) file holding the same rows as WriteRows.
TEST_F(CliTest, UploadsBigEndianFortranOrderFiles) {
  const double fortran_order[] = {1, 4, 2, 4, 5, 2};
  std::string data;
  for (const double value : fortran_order) {
    char bytes[sizeof(double)];
    std::memcpy(bytes, &value, sizeof(double));
    std::reverse(std::begin(bytes), std::end(bytes));
    data.append(bytes, sizeof(double));
  }
  WriteNpyWithHeader(PathOf("fortran.npy"),
                     "{'descr': '>f8', 'fortran_order': True, 'shape': (2, 3), }", data);

  const CliRun upload = Cli({"upload", PathOf("fortran.npy")});
  ASSERT_EQ(upload.exit_code, 0) << upload.err;
  EXPECT_THAT(Download(OnlyBufferId()), ElementsAre(1, 2, 5, 4, 4, 2));

  const CliRun normalize = Cli({"normalize", absl::StrCat("--input=", PathOf("fortran.npy"))});
  ASSERT_EQ(normalize.exit_code, 0) << normalize.err;
  EXPECT_THAT(normalize.out, HasSubstr("values      [0.125, 0.25, 0.625, 0.4, 0.4, 0.2]"));
}

TEST_F(CliTest, UnsupportedDTypeFailsWithNothingOnStdout) {
  WriteNpyWithHeader(PathOf("ints.npy"),
                     "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                     std::string(8, '\0'));

  const CliRun upload = Cli({"upload", PathOf("ints.npy")});
  EXPECT_EQ(upload.exit_code, 1);
  EXPECT_THAT(upload.out, IsEmpty());
  EXPECT_THAT(upload.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(upload.err, HasSubstr("unsupported dtype '<i4'"));
}

}  // namespace
}  // namespace gpucompute
