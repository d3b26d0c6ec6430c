// Transport security and caller identity: TLS / mutual TLS credentials, bearer
// tokens checked by an AuthMetadataProcessor against SHA-256 hashes (tokens are
// never stored in the clear), and the principal a call runs as.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

namespace gpucompute {

struct SecurityConfig {
  std::string tls_cert_file;       // PEM server certificate chain; empty: plaintext
  std::string tls_key_file;        // PEM private key
  std::string tls_client_ca_file;  // PEM CA; set: clients must present a certificate it signed
  std::string auth_tokens_file;    // "principal sha256:HEX" per line; set: bearer tokens required
};

// The auth-context property holding the principal a call was authenticated as.
inline constexpr char kPrincipalProperty[] = "gpucompute.principal";

// Lower-case hex SHA-256 of `token`.
std::string Sha256Hex(absl::string_view token);

// NAME -> hex SHA-256, from a file of "NAME sha256:HEX" lines ('#' comments);
// the tokens file and the metrics basic-auth file. Errors name `flag` and the line.
absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ReadHashFile(
    const std::string& path, absl::string_view flag);

// Checks "authorization: Bearer <token>" on every call except health checks, which
// stay open for probes. A missing or unknown token is UNAUTHENTICATED.
class TokenAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // `hashes`: principal -> hex SHA-256 of its token.
  explicit TokenAuthProcessor(absl::flat_hash_map<std::string, std::string> hashes);

  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  // hex hash -> principal
  absl::flat_hash_map<std::string, std::string> principal_by_hash_;
};

// Server credentials for `config`: plaintext, TLS, or mutual TLS, with the token
// processor attached when tokens are configured (which requires TLS: a bearer
// token must not cross the network in the clear).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SecurityConfig& config);

// Who the call is: the token's principal, else the client certificate's common
// name (mutual TLS), else "" (anonymous; all anonymous callers share buffers).
std::string PrincipalOf(const grpc::CallbackServerContext& context);

}  // namespace gpucompute
