// TLS, mutual TLS and bearer tokens with certificates made by openssl for the
// test; buffers that belong to one principal are invisible to another.
#include "server/security.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "common/error_reason.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A CA, a server certificate for localhost, a client certificate "alice" signed
// by the CA, and a self-signed "mallory" the CA never saw.
class Certificates {
 public:
  Certificates() : dir_(fs::temp_directory_path() / absl::StrCat("gpucompute-tls-", getpid())) {
    fs::create_directories(dir_);
    const std::string d = dir_.string();
    const std::string script = absl::StrCat(
        "set -e; cd ", d, ";",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca.key "
        "-out ca.pem;",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext;",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out server.csr;",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile san.ext -out server.pem;",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=alice -keyout alice.key -out alice.csr;",
        "openssl x509 -req -in alice.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-out alice.pem;",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=mallory -keyout mallory.key "
        "-out mallory.pem;",
        "printf 'alice sha256:%s\\nbob sha256:%s\\n' "
        "$(printf %s alice-token | sha256sum | cut -d' ' -f1) "
        "$(printf %s bob-token | sha256sum | cut -d' ' -f1) > tokens.txt");
    ok_ = std::system(absl::StrCat("bash -c \"", script, "\" > /dev/null 2>&1").c_str()) == 0;
  }
  ~Certificates() { fs::remove_all(dir_); }

  bool ok() const { return ok_; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string pem(const std::string& name) const { return ReadAll(dir_ / name); }

 private:
  fs::path dir_;
  bool ok_ = false;
};

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certs_ = new Certificates(); }
  static void TearDownTestSuite() { delete certs_; }

  void SetUp() override { ASSERT_TRUE(certs_->ok()) << "openssl could not make certificates"; }

  void Start(bool mutual, bool tokens) {
    ServerConfig config = test::LoopbackConfig();
    config.principal_quota_bytes = 1000;
    config.allow_shared_memory = true;
    config.security.tls_cert_file = certs_->path("server.pem");
    config.security.tls_key_file = certs_->path("server.key");
    if (mutual) config.security.tls_client_ca_file = certs_->path("ca.pem");
    if (tokens) config.security.auth_tokens_file = certs_->path("tokens.txt");
    auto server = test::TestServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
  }

  std::string Target() const { return server_->target(); }

  // A TLS client trusting the test CA, optionally with a client certificate and token.
  std::unique_ptr<client::Client> TlsClient(const std::string& cert = "",
                                            const std::string& token = "") {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = certs_->pem("ca.pem");
    if (!cert.empty()) {
      options.pem_cert_chain = certs_->pem(cert + ".pem");
      options.pem_private_key = certs_->pem(cert + ".key");
    }
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(options);
    if (!token.empty()) {
      credentials = grpc::CompositeChannelCredentials(credentials,
                                                      grpc::AccessTokenCredentials(token));
    }
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    client::ClientOptions client_options;
    client_options.timeout = absl::Seconds(10);
    return std::make_unique<client::Client>(
        grpc::CreateCustomChannel(Target(), credentials, args), client_options);
  }

  static v1::Tensor Row() { return test::F64({1, 3}, {2}); }

  static Certificates* certs_;
  std::unique_ptr<test::TestServer> server_;
};

Certificates* SecurityTest::certs_ = nullptr;

TEST_F(SecurityTest, TlsServesTlsClientsAndRejectsPlaintext) {
  ASSERT_NO_FATAL_FAILURE(Start(/*mutual=*/false, /*tokens=*/false));
  auto info = TlsClient()->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_TRUE(info->limits().tls());
  EXPECT_FALSE(info->limits().mutual_tls());

  client::ClientOptions options;
  options.timeout = absl::Seconds(3);
  client::Client plaintext(client::MakeChannel(Target()), options);
  const absl::Status refused = plaintext.GetInfo().status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused.message();
}

TEST_F(SecurityTest, MutualTlsNeedsACertificateFromTheTrustedCa) {
  ASSERT_NO_FATAL_FAILURE(Start(/*mutual=*/true, /*tokens=*/false));
  auto alice = TlsClient("alice")->GetInfo();
  ASSERT_TRUE(alice.ok()) << alice.status().message();
  EXPECT_TRUE(alice->limits().mutual_tls());
  EXPECT_EQ(TlsClient()->GetInfo().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(TlsClient("mallory")->GetInfo().status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, TokensAreRequiredExceptForHealth) {
  ASSERT_NO_FATAL_FAILURE(Start(/*mutual=*/false, /*tokens=*/true));
  const absl::Status missing = TlsClient()->GetInfo().status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("authorization"));
  const absl::Status wrong = TlsClient("", "not-a-token")->GetInfo().status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(wrong.message()), HasSubstr("unknown bearer token"));
  auto health = TlsClient()->Health();
  ASSERT_TRUE(health.ok()) << health.status().message();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
  auto info = TlsClient("", "alice-token")->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_TRUE(info->limits().token_auth());
}

TEST_F(SecurityTest, BuffersBelongToTheirPrincipal) {
  ASSERT_NO_FATAL_FAILURE(Start(/*mutual=*/false, /*tokens=*/true));
  auto alice = TlsClient("", "alice-token");
  auto bob = TlsClient("", "bob-token");
  auto stored = alice->Upload("mine", Row());
  ASSERT_TRUE(stored.ok()) << stored.status().message();

  // To bob the id does not exist: NOT_FOUND, never PERMISSION_DENIED.
  EXPECT_EQ(bob->Download(stored->id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bob->Delete(stored->id()).status().code(), absl::StatusCode::kNotFound);
  v1::NormalizeRequest request;
  request.mutable_input()->set_buffer_id(stored->id());
  EXPECT_EQ(bob->Normalize(request).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bob->List()->buffers_size(), 0);

  auto normalized = alice->Normalize(request);
  ASSERT_TRUE(normalized.ok()) << normalized.status().message();
  EXPECT_THAT(*normalized->AsDoubles(), ::testing::ElementsAre(0.25, 0.75));
  EXPECT_EQ(alice->List()->buffers_size(), 1);
}

// Shared-memory regions too: another principal can neither use nor unregister
// one by its id, nor register its key.
TEST_F(SecurityTest, SharedMemoryRegionsBelongToTheirPrincipal) {
  ASSERT_NO_FATAL_FAILURE(Start(/*mutual=*/false, /*tokens=*/true));
  auto alice = TlsClient("", "alice-token");
  auto bob = TlsClient("", "bob-token");
  auto region = client::SharedRegion::Create(*alice, 2 * sizeof(double), "alice's");
  ASSERT_TRUE(region.ok()) << region.status().message();
  const double row[] = {1, 3};
  std::memcpy((*region)->data(), row, sizeof(row));
  v1::NormalizeRequest request;
  *request.mutable_input() = (*region)->Operand(0, v1::FLOAT64, {2});

  EXPECT_EQ(bob->Normalize(request).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bob->UnregisterSharedMemory((*region)->id()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(bob->SharedMemoryStatus()->regions_size(), 0);
  EXPECT_EQ(bob->RegisterSystemSharedMemory("mine now", (*region)->key(), 0, 16).status().code(),
            absl::StatusCode::kPermissionDenied);

  auto normalized = alice->Normalize(request);
  ASSERT_TRUE(normalized.ok()) << normalized.status().message();
  EXPECT_THAT(*normalized->AsDoubles(), ::testing::ElementsAre(0.25, 0.75));
  EXPECT_EQ(alice->SharedMemoryStatus()->regions_size(), 1);
}

// An object a principal registered stays that principal's while it exists:
// after alice unregisters it, bob (here the same local user) may not take it.
TEST_F(SecurityTest, AnUnregisteredObjectStaysItsPrincipals) {
  ASSERT_NO_FATAL_FAILURE(Start(/*mutual=*/false, /*tokens=*/true));
  auto alice = TlsClient("", "alice-token");
  auto bob = TlsClient("", "bob-token");
  const std::string key = absl::StrCat("/gpucompute-security-", getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  auto region = alice->RegisterSystemSharedMemory("alice's", key, 0, 4096);
  ASSERT_TRUE(region.ok()) << region.status().message();
  ASSERT_TRUE(alice->UnregisterSharedMemory(region->id()).ok());
  const absl::Status taken = bob->RegisterSystemSharedMemory("mine now", key, 0, 4096).status();
  EXPECT_EQ(taken.code(), absl::StatusCode::kPermissionDenied) << taken.message();
  EXPECT_EQ(ReasonOf(taken), reason::kSharedMemoryNotOwned);
  EXPECT_TRUE(alice->RegisterSystemSharedMemory("alice's again", key, 0, 4096).ok());
  shm_unlink(key.c_str());
}

TEST_F(SecurityTest, PerPrincipalQuota) {
  ASSERT_NO_FATAL_FAILURE(Start(/*mutual=*/false, /*tokens=*/true));
  auto alice = TlsClient("", "alice-token");
  const std::vector<int64_t> shape = {100};  // 800 bytes of the 1000 each may store
  ASSERT_TRUE(alice->Upload("a", v1::FLOAT64, shape, std::string(800, '\0')).ok());
  const absl::Status over =
      alice->Upload("b", v1::FLOAT64, shape, std::string(800, '\0')).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.message()), HasSubstr("principal_quota_bytes 1000"));
  // Bob's quota is his own.
  EXPECT_TRUE(TlsClient("", "bob-token")->Upload("b", v1::FLOAT64, shape, std::string(800, '\0')).ok());
}

TEST(SecurityConfigTest, TokensWithoutTlsAreRefusedAtStart) {
  SecurityConfig config;
  config.auth_tokens_file = "/nonexistent";
  const auto credentials = MakeServerCredentials(config);
  EXPECT_EQ(credentials.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(credentials.status().message()), HasSubstr("need TLS"));
}

TEST(SecurityConfigTest, HashFileErrorsNameTheLine) {
  const std::string path = (fs::temp_directory_path() / "gpucompute-bad-tokens.txt").string();
  std::ofstream(path) << "# comment\nalice sha256:abc\n";
  const auto hashes = ReadHashFile(path, "--auth_tokens_file");
  EXPECT_EQ(hashes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(hashes.status().message()), HasSubstr("line 2"));
  fs::remove(path);
}

TEST(SecurityConfigTest, Sha256OfAKnownString) {
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace gpucompute
