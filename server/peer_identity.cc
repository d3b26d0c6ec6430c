#include "server/peer_identity.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/error_reason.h"

namespace gpucompute {
namespace {

struct Endpoint {
  int family = AF_INET;
  unsigned char address[16] = {};  // network order: 4 bytes for AF_INET
  uint16_t port = 0;               // host order
};

// The far end of this process's socket `fd` (a connection gRPC took from a
// descriptor: RecoveryListener).
std::optional<Endpoint> PeerOfDescriptor(absl::string_view number) {
  int fd = -1;
  if (!absl::SimpleAtoi(number, &fd)) return std::nullopt;
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return std::nullopt;
  Endpoint end;
  end.family = address.ss_family;
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    std::memcpy(end.address, &v4.sin_addr, 4);
    end.port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    std::memcpy(end.address, &v6.sin6_addr, 16);
    end.port = ntohs(v6.sin6_port);
  } else {
    return std::nullopt;
  }
  return end;
}

// "ipv4:A.B.C.D:PORT", "ipv6:[ADDR]:PORT" ("%5B"/"%5D" URL-encoded too) or "fd:N".
std::optional<Endpoint> ParsePeer(absl::string_view peer) {
  Endpoint end;
  std::string host;
  absl::string_view port;
  if (absl::ConsumePrefix(&peer, "fd:")) return PeerOfDescriptor(peer);
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    const size_t colon = peer.rfind(':');
    if (colon == absl::string_view::npos) return std::nullopt;
    host = std::string(peer.substr(0, colon));
    port = peer.substr(colon + 1);
  } else if (absl::ConsumePrefix(&peer, "ipv6:")) {
    end.family = AF_INET6;
    std::string decoded(peer);
    for (auto [from, to] : {std::pair{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}}) {
      for (size_t at; (at = decoded.find(from)) != std::string::npos;) decoded.replace(at, 3, to);
    }
    const size_t close = decoded.rfind("]:");
    if (decoded.empty() || decoded[0] != '[' || close == std::string::npos) return std::nullopt;
    host = decoded.substr(1, close - 1);
    const size_t zone = host.find('%');  // link-local zone index
    if (zone != std::string::npos) host.resize(zone);
    port = absl::string_view(decoded).substr(close + 2);
    uint32_t number = 0;
    if (!absl::SimpleAtoi(port, &number) || number > 65535) return std::nullopt;
    end.port = static_cast<uint16_t>(number);
    if (inet_pton(AF_INET6, host.c_str(), end.address) != 1) return std::nullopt;
    return end;
  } else {
    return std::nullopt;
  }
  uint32_t number = 0;
  if (!absl::SimpleAtoi(port, &number) || number > 65535) return std::nullopt;
  end.port = static_cast<uint16_t>(number);
  if (inet_pton(AF_INET, host.c_str(), end.address) != 1) return std::nullopt;
  return end;
}

// A sock_diag dump request for the connected TCP sockets of `family` whose
// local port is `port`: the kernel filters by the port (bytecode "sport >= port
// and sport <= port"), so that a server with thousands of connections hands
// back one or two. A jump past the end of the bytecode rejects the socket.
struct DumpRequest {
  nlmsghdr header;
  inet_diag_req_v2 request;
  nlattr bytecode;
  inet_diag_bc_op ops[4];
};

DumpRequest PortDump(int family, uint16_t port) {
  DumpRequest message{};
  message.header.nlmsg_len = sizeof(message);
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = static_cast<uint8_t>(family);
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = 1u << TCP_ESTABLISHED;
  message.bytecode.nla_len = static_cast<uint16_t>(NLA_HDRLEN + sizeof(message.ops));
  message.bytecode.nla_type = INET_DIAG_REQ_BYTECODE;
  constexpr uint16_t kLength = sizeof(message.ops);
  message.ops[0] = {INET_DIAG_BC_S_GE, 8, kLength + 4};
  message.ops[1] = {0, 0, port};
  message.ops[2] = {INET_DIAG_BC_S_LE, 8, kLength - 8 + 4};
  message.ops[3] = {0, 0, port};
  return message;
}

// The uids of this namespace's connected TCP sockets of `family` whose local
// end is `end`, from one sock_diag dump.
absl::StatusOr<std::vector<uint32_t>> OwnersOf(int family, const Endpoint& end) {
  const int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot ask the kernel who owns the connection: ", std::strerror(errno)));
  }
  const DumpRequest message = PortDump(family, end.port);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::vector<uint32_t> owners;
  absl::Status status;
  if (sendto(fd, &message, sizeof(message), 0, reinterpret_cast<sockaddr*>(&kernel),
             sizeof(kernel)) < 0) {
    status = absl::UnavailableError(absl::StrCat("sock_diag: ", std::strerror(errno)));
  }
  alignas(nlmsghdr) char buffer[32768];
  bool done = !status.ok();
  while (!done) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      status = absl::UnavailableError(absl::StrCat("sock_diag: ", std::strerror(errno)));
      break;
    }
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        done = true;
        break;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        status = absl::UnavailableError("sock_diag refused the socket dump");
        done = true;
        break;
      }
      const auto* socket = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      const size_t address_bytes = end.family == AF_INET ? 4 : 16;
      if (ntohs(socket->id.idiag_sport) == end.port &&
          std::memcmp(socket->id.idiag_src, end.address, address_bytes) == 0) {
        owners.push_back(socket->idiag_uid);
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return owners;
}

}  // namespace

absl::StatusOr<uint32_t> LocalPeerUid(absl::string_view peer) {
  const std::optional<Endpoint> end = ParsePeer(peer);
  if (!end.has_value()) {
    return WithReason(absl::PermissionDeniedError(absl::StrCat(
        "cannot tell which local user connection ", peer,
        " is (shared memory needs a TCP connection from this host)")),
                      reason::kSharedMemoryCallerUnknown);
  }
  // An IPv4 peer may be an IPv6 socket bound to the v4-mapped address
  // (::ffff:a.b.c.d; gRPC makes dual-stack sockets), and gRPC may name a mapped
  // peer either way: both families are looked at.
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  Endpoint other;
  other.port = end->port;
  if (end->family == AF_INET) {
    other.family = AF_INET6;
    std::memcpy(other.address, kMapped, 12);
    std::memcpy(other.address + 12, end->address, 4);
  } else {
    other.family = AF_INET;
    std::memcpy(other.address, end->address + 12, 4);
  }
  std::vector<Endpoint> candidates = {*end};
  if (end->family == AF_INET || std::memcmp(end->address, kMapped, 12) == 0) {
    candidates.push_back(other);
  }
  std::vector<uint32_t> owners;
  for (const Endpoint& candidate : candidates) {
    absl::StatusOr<std::vector<uint32_t>> found = OwnersOf(candidate.family, candidate);
    if (!found.ok()) return found.status();
    owners.insert(owners.end(), found->begin(), found->end());
  }
  if (owners.empty()) {
    return WithReason(absl::PermissionDeniedError(absl::StrCat(
        "connection ", peer, " does not come from this host's network namespace; shared "
        "memory is for clients on the server's host")),
                      reason::kSharedMemoryCallerUnknown);
  }
  for (uint32_t uid : owners) {
    // Two sockets sharing the endpoint (SO_REUSEPORT) of two users: no answer.
    if (uid != owners.front()) {
      return WithReason(absl::PermissionDeniedError(absl::StrCat(
          "connection ", peer, " is owned by more than one local user; shared memory refused")),
                        reason::kSharedMemoryCallerUnknown);
    }
  }
  return owners.front();
}

}  // namespace gpucompute
