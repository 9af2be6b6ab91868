#include "qload/dist/rendezvous.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace qload {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::array<char, 8> kMagic = {'q', 'l', 'o', 'a', 'd', '-', 'r', 'v'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint64_t kMaxMessage = std::uint64_t{64} << 20;

// What a connecting rank says first: magic, version, world size, rank (little-endian).
struct Hello {
  std::array<char, 8> magic = kMagic;
  std::uint32_t version = kVersion;
  std::uint32_t size = 0;
  std::uint32_t rank = 0;
};

std::string where(const World& w) {
  return fmt::format("{}:{}", w.master_addr, w.master_port);
}

Error io_error(std::string message) {
  return Error(Errc::kIo, std::move(message));
}

std::string errno_text(int err) {
  return std::strerror(err);
}

// Bounds every read and write on `fd` by `timeout` (zero: no bound).
void set_timeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{.tv_sec = static_cast<time_t>(timeout.count() / 1000),
             .tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Sends small messages at once, notices a peer whose node vanished (keepalive probes after a
// minute idle), and bounds waits by `timeout`.
void configure(int fd, std::chrono::milliseconds timeout) {
  set_timeout(fd, timeout);
  const int one = 1, idle = 60, interval = 10, probes = 6;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

// `peer` names the other side in errors ("rank 3").
Status send_all(int fd, const void* data, std::size_t bytes, const std::string& peer) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return fail(io_error(fmt::format("rendezvous: timed out sending to {}", peer)));
    if (n < 0) return fail(io_error(fmt::format("rendezvous: sending to {}: {}", peer, errno_text(errno))));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return {};
}

Status recv_all(int fd, void* data, std::size_t bytes, const std::string& peer) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return fail(io_error(fmt::format("rendezvous: timed out waiting for {}", peer)));
    if (n < 0) return fail(io_error(fmt::format("rendezvous: receiving from {}: {}", peer, errno_text(errno))));
    if (n == 0) return fail(io_error(fmt::format("rendezvous: {} closed the connection (it failed or exited)", peer)));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return {};
}

Status send_message(int fd, std::string_view message, const std::string& peer) {
  const std::uint64_t length = message.size();
  QLOAD_TRY(send_all(fd, &length, sizeof length, peer));
  return send_all(fd, message.data(), message.size(), peer);
}

Result<std::string> recv_message(int fd, const std::string& peer) {
  std::uint64_t length = 0;
  QLOAD_TRY(recv_all(fd, &length, sizeof length, peer));
  if (length > kMaxMessage)
    return fail(io_error(fmt::format("rendezvous: {} sent a {} byte message (at most {})", peer, length, kMaxMessage)));
  std::string message(length, '\0');
  QLOAD_TRY(recv_all(fd, message.data(), message.size(), peer));
  return message;
}

std::string rank_name(std::uint32_t rank) {
  return fmt::format("rank {}", rank);
}

// Rank 0: listens on every interface at the master port and takes one connection per rank.
Result<std::vector<UniqueFd>> accept_ranks(const World& world, std::chrono::milliseconds timeout) {
  UniqueFd listener(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool v6 = listener.valid();
  if (!v6) listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener) return fail(io_error("rendezvous: socket: " + errno_text(errno)));
  const int one = 1, zero = 0;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int bound = -1;
  if (v6) {
    ::setsockopt(listener.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 peers too
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(world.master_port);
    bound = ::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(world.master_port);
    bound = ::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  }
  if (bound != 0 || ::listen(listener.get(), static_cast<int>(std::min<std::uint32_t>(world.size, 4096))) != 0)
    return fail(
        io_error(fmt::format("rendezvous: rank 0 cannot listen on port {}: {}", world.master_port, errno_text(errno))));
  std::vector<UniqueFd> peers(world.size);
  const Clock::time_point deadline = Clock::now() + timeout;
  for (std::uint32_t joined = 1; joined < world.size;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd pfd{.fd = listener.get(), .events = POLLIN, .revents = 0};
    const int ready = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0)
      return fail(io_error(fmt::format("rendezvous: rank 0 waited {} ms on port {}, and {} of {} ranks joined",
                                       timeout.count(), world.master_port, joined, world.size)));
    UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) continue;  // the peer went away before we took it; it will retry
    // A hello within a second, or the connection is dropped: something that is not a qload
    // rank of this version (a port scanner, a stale job) must not stall or fail the load.
    configure(conn.get(), std::min(timeout, std::chrono::milliseconds(1000)));
    Hello hello;
    if (!recv_all(conn.get(), &hello, sizeof hello, "a joining rank") || hello.magic != kMagic ||
        hello.version != kVersion)
      continue;
    configure(conn.get(), timeout);
    if (hello.size != world.size)
      return fail(Error(Errc::kInvalidArgument, fmt::format("rendezvous: rank {} says WORLD_SIZE is {}, rank 0 says {}",
                                                            hello.rank, hello.size, world.size)));
    if (hello.rank == 0 || hello.rank >= world.size || peers[hello.rank])
      return fail(Error(Errc::kInvalidArgument,
                        fmt::format("rendezvous: two processes claim RANK {} of {}", hello.rank, world.size)));
    peers[hello.rank] = std::move(conn);
    ++joined;
  }
  return peers;
}

// Any other rank: connects to rank 0, retrying until it listens or the deadline passes.
Result<UniqueFd> connect_to_rank0(const World& world, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string port = std::to_string(world.master_port);
  std::string last_error = "no address";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(world.master_addr.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) {
      last_error = ::gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (!fd) continue;
        if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(found);
          configure(fd.get(), timeout);
          return fd;
        }
        last_error = errno_text(errno);
      }
      ::freeaddrinfo(found);
    }
    if (Clock::now() >= deadline)
      return fail(io_error(fmt::format("rendezvous: rank {} could not reach rank 0 at {} within {} ms: {}", world.rank,
                                       where(world), timeout.count(), last_error)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 may not listen yet
  }
}

}  // namespace

Result<Rendezvous> Rendezvous::join(const World& world, std::chrono::milliseconds timeout) {
  if (world.size == 0 || world.rank >= world.size)
    return fail(Error(Errc::kInvalidArgument, fmt::format("rank {} of a world of {}", world.rank, world.size)));
  if (world.size == 1) return Rendezvous(world, timeout, {});  // alone: nobody to meet
  if (world.rank == 0) {
    QLOAD_ASSIGN_OR_RETURN(std::vector<UniqueFd> peers, accept_ranks(world, timeout));
    return Rendezvous(world, timeout, std::move(peers));
  }
  QLOAD_ASSIGN_OR_RETURN(UniqueFd fd, connect_to_rank0(world, timeout));
  const Hello hello{.size = world.size, .rank = world.rank};
  QLOAD_TRY(send_all(fd.get(), &hello, sizeof hello, "rank 0"));
  std::vector<UniqueFd> peers;
  peers.push_back(std::move(fd));
  return Rendezvous(world, timeout, std::move(peers));
}

Result<std::vector<std::string>> Rendezvous::allgather(std::string_view mine) {
  return allgather(mine, timeout_);
}

Result<std::vector<std::string>> Rendezvous::allgather(std::string_view mine, std::chrono::milliseconds wait) {
  for (UniqueFd& peer : peers_)
    if (peer) set_timeout(peer.get(), wait);
  if (mine.size() > kMaxMessage)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("a {} byte rendezvous message (at most {})", mine.size(), kMaxMessage)));
  std::vector<std::string> all(world_.size);
  if (world_.size == 1) {
    all[0] = std::string(mine);
    return all;
  }
  if (world_.rank != 0) {
    QLOAD_TRY(send_message(peers_[0].get(), mine, "rank 0"));
    for (std::uint32_t r = 0; r < world_.size; ++r) {
      QLOAD_ASSIGN_OR_RETURN(all[r], recv_message(peers_[0].get(), "rank 0"));
    }
    return all;
  }
  all[0] = std::string(mine);
  for (std::uint32_t r = 1; r < world_.size; ++r) {
    QLOAD_ASSIGN_OR_RETURN(all[r], recv_message(peers_[r].get(), rank_name(r)));
  }
  for (std::uint32_t r = 1; r < world_.size; ++r)
    for (const std::string& message : all) QLOAD_TRY(send_message(peers_[r].get(), message, rank_name(r)));
  return all;
}

Result<std::vector<std::string>> Rendezvous::alltoall(std::span<const std::string_view> to_each) {
  if (to_each.size() != world_.size)
    return fail(Errc::kInvalidArgument,
                fmt::format("alltoall: {} messages for a world of {}", to_each.size(), world_.size));
  for (const std::string_view m : to_each)
    if (m.size() > kMaxMessage)
      return fail(Errc::kInvalidArgument,
                  fmt::format("a {} byte rendezvous message (at most {})", m.size(), kMaxMessage));
  for (UniqueFd& peer : peers_)
    if (peer) set_timeout(peer.get(), timeout_);
  std::vector<std::string> from(world_.size);
  from[world_.rank] = std::string(to_each[world_.rank]);
  if (world_.size == 1) return from;
  if (world_.rank != 0) {
    // Everything this rank sends, in destination order (its own slot empty), then what each
    // rank sent it, in source order.
    for (std::uint32_t q = 0; q < world_.size; ++q)
      QLOAD_TRY(send_message(peers_[0].get(), q == world_.rank ? std::string_view() : to_each[q], "rank 0"));
    for (std::uint32_t r = 0; r < world_.size; ++r) {
      QLOAD_ASSIGN_OR_RETURN(std::string message, recv_message(peers_[0].get(), "rank 0"));
      if (r != world_.rank) from[r] = std::move(message);
    }
    return from;
  }
  // Rank 0 routes: sent[r][q] is what rank r sends rank q.
  std::vector<std::vector<std::string>> sent(world_.size);
  for (std::uint32_t r = 1; r < world_.size; ++r) {
    sent[r].resize(world_.size);
    for (std::uint32_t q = 0; q < world_.size; ++q) {
      QLOAD_ASSIGN_OR_RETURN(sent[r][q], recv_message(peers_[r].get(), rank_name(r)));
    }
    from[r] = std::move(sent[r][0]);
  }
  for (std::uint32_t q = 1; q < world_.size; ++q)
    for (std::uint32_t r = 0; r < world_.size; ++r)
      QLOAD_TRY(send_message(peers_[q].get(), r == 0 ? to_each[q] : std::string_view(sent[r][q]), rank_name(q)));
  return from;
}

}  // namespace qload
