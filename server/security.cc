#include "server/security.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace gpucompute {
namespace {

constexpr absl::string_view kBearerPrefix = "Bearer ";

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(flag, " file '", path, "' cannot be read"));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

bool IsHealthCheck(const grpc::AuthMetadataProcessor::InputMetadata& metadata) {
  auto path = metadata.find(":path");
  return path != metadata.end() &&
         absl::StartsWith(absl::string_view(path->second.data(), path->second.size()),
                          "/grpc.health.v1.Health/");
}

}  // namespace

std::string Sha256Hex(absl::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(token.data(), token.size(), digest, &length, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), length));
}

absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ReadHashFile(
    const std::string& path, absl::string_view flag) {
  GC_ASSIGN_OR_RETURN(const std::string contents, ReadFile(path, flag));
  absl::flat_hash_map<std::string, std::string> hashes;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    absl::string_view hash;
    if (fields.size() != 2 || !absl::ConsumePrefix(&(hash = fields[1]), "sha256:") ||
        hash.size() != 64 || hash.find_first_not_of("0123456789abcdef") != hash.npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " ", path, " line ", line_number,
          ": expected 'NAME sha256:<64 lower-case hex digits>'"));
    }
    hashes[std::string(fields[0])] = std::string(hash);
  }
  if (hashes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, " has no entries"));
  }
  return hashes;
}

TokenAuthProcessor::TokenAuthProcessor(absl::flat_hash_map<std::string, std::string> hashes) {
  for (auto& [principal, hash] : hashes) principal_by_hash_[hash] = principal;
}

grpc::Status TokenAuthProcessor::Process(const InputMetadata& auth_metadata,
                                         grpc::AuthContext* context,
                                         OutputMetadata* consumed_auth_metadata,
                                         OutputMetadata*) {
  if (IsHealthCheck(auth_metadata)) return grpc::Status::OK;
  auto header = auth_metadata.find("authorization");
  if (header == auth_metadata.end()) {
    return grpc::Status(grpc::UNAUTHENTICATED,
                        "missing 'authorization: Bearer <token>' metadata");
  }
  absl::string_view value(header->second.data(), header->second.size());
  if (!absl::ConsumePrefix(&value, kBearerPrefix)) {
    return grpc::Status(grpc::UNAUTHENTICATED, "authorization metadata is not 'Bearer <token>'");
  }
  // Hashing first makes the lookup independent of how much of a token matches.
  auto principal = principal_by_hash_.find(Sha256Hex(value));
  if (principal == principal_by_hash_.end()) {
    return grpc::Status(grpc::UNAUTHENTICATED, "unknown bearer token");
  }
  context->AddProperty(kPrincipalProperty, principal->second);
  context->SetPeerIdentityPropertyName(kPrincipalProperty);
  consumed_auth_metadata->insert({std::string(header->first.data(), header->first.size()),
                                  std::string(header->second.data(), header->second.size())});
  return grpc::Status::OK;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SecurityConfig& config) {
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  if (config.tls_cert_file.empty()) {
    if (!config.tls_client_ca_file.empty() || !config.auth_tokens_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca and --auth_tokens_file need TLS (--tls_cert and --tls_key)");
    }
    return grpc::InsecureServerCredentials();
  }
  GC_ASSIGN_OR_RETURN(std::string cert, ReadFile(config.tls_cert_file, "--tls_cert"));
  GC_ASSIGN_OR_RETURN(std::string key, ReadFile(config.tls_key_file, "--tls_key"));
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
  if (!config.tls_client_ca_file.empty()) {
    GC_ASSIGN_OR_RETURN(options.pem_root_certs,
                        ReadFile(config.tls_client_ca_file, "--tls_client_ca"));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(options);
  if (!config.auth_tokens_file.empty()) {
    GC_ASSIGN_OR_RETURN(auto hashes, ReadHashFile(config.auth_tokens_file, "--auth_tokens_file"));
    credentials->SetAuthMetadataProcessor(std::make_shared<TokenAuthProcessor>(std::move(hashes)));
  }
  return credentials;
}

std::string PrincipalOf(const grpc::CallbackServerContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return "";
  for (const char* property : {kPrincipalProperty, "x509_common_name"}) {
    std::vector<grpc::string_ref> values = auth->FindPropertyValues(property);
    if (!values.empty()) return std::string(values.front().data(), values.front().size());
  }
  return "";
}

}  // namespace gpucompute
