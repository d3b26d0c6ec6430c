// Which local user is at the other end of a connection from this host: the uid
// that owns the client's TCP socket, asked of the kernel through sock_diag (what
// `ss -e` shows). An address alone (127.0.0.7, ::ffff:127.0.0.1) says nothing
// about who connects, since any relay or proxy on the host has one; the socket's
// owner is the user that made the connection, so a relay is its own user.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpucompute {

// The uid owning the socket at the far end of the gRPC peer `peer`
// ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "ipv6:[::ffff:127.0.0.1]:5000").
// PERMISSION_DENIED when no socket of this host's network namespace is that
// end (a remote client, or one in another namespace), or when gRPC gives no
// address (a Unix socket: gRPC's API does not expose its peer credentials).
absl::StatusOr<uint32_t> LocalPeerUid(absl::string_view peer);

}  // namespace gpucompute
