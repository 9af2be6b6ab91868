#include "qload/distributed/rendezvous.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "world_auth.hpp"

namespace qload::distributed {
namespace {

using Clock = std::chrono::steady_clock;

using detail::bytes_of;
using detail::hmac_sha256;
using detail::Mac;
using detail::Nonce;
using detail::RendezvousChannel;

constexpr std::array<char, 8> kMagic = {'q', 'l', 'o', 'a', 'd', '-', 'r', 'v'};
constexpr std::uint32_t kVersion = 2;  // 2: authenticated (1 trusted any hello)
constexpr std::uint64_t kMaxMessage = std::uint64_t{64} << 20;
// How long a connection may take to complete its handshake, and how many may be pending at
// once: a stranger that connects and says nothing costs rank 0 at most this, never the load.
constexpr std::chrono::milliseconds kHandshakeTime{5000};
constexpr std::size_t kMaxPending = 64;

// The handshake: each struct goes on the wire as laid out in memory (sizes fixed by the
// static_assert below; every rank is the same x86-64 build, so the byte order agrees). Rank 0 speaks first with a
// nonce; the joining rank answers with its nonce, its world and an HMAC over both nonces and its world under the token;
// rank 0 answers with its own HMAC over the same, and both derive the connection's keys.
struct Challenge {
  std::array<char, 8> magic = kMagic;
  std::uint32_t version = kVersion;
  Nonce nonce{};
};
struct Hello {
  std::array<char, 8> magic = kMagic;
  std::uint32_t version = kVersion;
  std::uint32_t size = 0;
  std::uint32_t rank = 0;
  Nonce nonce{};
  Mac mac{};
};
static_assert(sizeof(Challenge) == 44 && sizeof(Hello) == 84, "the handshake's wire layout");

std::string_view bytes_of_u32(const std::uint32_t& v) {
  return {reinterpret_cast<const char*>(&v), sizeof v};
}

// What each side proves: the same fields under a different label, so neither proof can be
// replayed as the other.
Mac proof(std::string_view token, std::string_view label, const Nonce& rank0_nonce, const Hello& hello) {
  return hmac_sha256(
      token, {label, bytes_of(rank0_nonce), bytes_of(hello.nonce), bytes_of_u32(hello.size), bytes_of_u32(hello.rank)});
}
Mac joiner_proof(std::string_view token, const Nonce& rank0_nonce, const Hello& hello) {
  return proof(token, "qload rendezvous: a rank joins", rank0_nonce, hello);
}
Mac rank0_proof(std::string_view token, const Nonce& rank0_nonce, const Hello& hello) {
  return proof(token, "qload rendezvous: rank 0 welcomes it", rank0_nonce, hello);
}

// The connection's keys, one per direction, from the token and both nonces.
RendezvousChannel channel_of(UniqueFd fd, std::string_view token, const Nonce& rank0_nonce, const Hello& hello,
                             bool is_rank0) {
  const Mac to_rank0 =
      hmac_sha256(token, {"qload rendezvous: to rank 0", bytes_of(rank0_nonce), bytes_of(hello.nonce)});
  const Mac from_rank0 =
      hmac_sha256(token, {"qload rendezvous: from rank 0", bytes_of(rank0_nonce), bytes_of(hello.nonce)});
  const std::string up(to_rank0.begin(), to_rank0.end()), down(from_rank0.begin(), from_rank0.end());
  RendezvousChannel c;
  c.fd = std::move(fd);
  c.send_key = is_rank0 ? down : up;
  c.receive_key = is_rank0 ? up : down;
  return c;
}

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

// The length field's top bit marks an abort notice: rank 0 telling the others why an exchange
// ends (a rank gone or late), so that every rank's error names the rank at fault.
constexpr std::uint64_t kAbortNotice = std::uint64_t{1} << 63;

// A message: its length field, its bytes, and an HMAC under the direction's key over the
// message's number, length field and bytes.
Mac message_mac(const std::string& key, std::uint64_t number, std::uint64_t length, std::string_view message) {
  return hmac_sha256(key, {std::string_view(reinterpret_cast<const char*>(&number), sizeof number),
                           std::string_view(reinterpret_cast<const char*>(&length), sizeof length), message});
}

Status send_message(RendezvousChannel& c, std::string_view message, const std::string& peer, bool abort = false) {
  const std::uint64_t length = message.size() | (abort ? kAbortNotice : 0);
  const Mac mac = message_mac(c.send_key, c.sent++, length, message);
  QLOAD_TRY(send_all(c.fd.get(), &length, sizeof length, peer));
  QLOAD_TRY(send_all(c.fd.get(), message.data(), message.size(), peer));
  return send_all(c.fd.get(), mac.data(), mac.size(), peer);
}

Result<std::string> recv_message(RendezvousChannel& c, const std::string& peer) {
  std::uint64_t length = 0;
  QLOAD_TRY(recv_all(c.fd.get(), &length, sizeof length, peer));
  const std::uint64_t size = length & ~kAbortNotice;
  if (size > kMaxMessage)
    return fail(io_error(fmt::format("rendezvous: {} sent a {} byte message (at most {})", peer, size, kMaxMessage)));
  std::string message(size, '\0');
  QLOAD_TRY(recv_all(c.fd.get(), message.data(), message.size(), peer));
  Mac mac{};
  QLOAD_TRY(recv_all(c.fd.get(), mac.data(), mac.size(), peer));
  if (!detail::same_mac(mac, message_mac(c.receive_key, c.received++, length, message)))
    return fail(Error(Errc::kPermissionDenied,
                      fmt::format("rendezvous: message {} from {} failed its authentication (forged, replayed or "
                                  "altered on the way)",
                                  c.received - 1, peer)));
  if ((length & kAbortNotice) != 0)
    return fail(Error(Errc::kCancelled, fmt::format("{} ended the exchange: {}", peer, message)));
  return message;
}

std::string rank_name(std::uint32_t rank) {
  return fmt::format("rank {}", rank);
}

// The address of the other end of `fd`, for logs ("192.0.2.7:51234").
std::string peer_name(int fd) {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0)
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), length, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV);
  return fmt::format("{}:{}", host, port);
}

void set_blocking(int fd, bool blocking) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

// Rank 0's socket, bound to MASTER_ADDR's address only (the first of its addresses that binds):
// the rendezvous must not be reachable through interfaces the launcher did not name. "0.0.0.0"
// or "::" as MASTER_ADDR asks for every interface explicitly.
Result<UniqueFd> listen_on_master_addr(const World& world) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(world.master_port);
  if (const int rc = ::getaddrinfo(world.master_addr.c_str(), port.c_str(), &hints, &found); rc != 0)
    return fail(io_error(
        fmt::format("rendezvous: rank 0 cannot resolve MASTER_ADDR {}: {}", world.master_addr, ::gai_strerror(rc))));
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) continue;
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 &&
        ::listen(fd.get(), static_cast<int>(std::min<std::uint32_t>(world.size, 4096))) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    why = errno == EADDRNOTAVAIL ? "it is not an address of this machine" : errno_text(errno);
  }
  ::freeaddrinfo(found);
  return fail(io_error(fmt::format("rendezvous: rank 0 cannot listen on {}: {}", where(world), why)));
}

// A connection rank 0 accepted that has not proved the token yet.
struct Pending {
  UniqueFd fd;
  std::string from;
  Nonce nonce{};
  Clock::time_point deadline;
  Hello hello;
  std::size_t got = 0;  // bytes of `hello` received
};

// When a rank that is still waiting for the others says so: a quarter of the timeout in, then
// every quarter (at most every 30 s), so that a process started alone, or one whose peers
// never come, does not look hung for the whole timeout.
class WaitNotice {
 public:
  explicit WaitNotice(std::chrono::milliseconds timeout)
      : every_(std::clamp<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(100),
                                                     std::chrono::seconds(30))) {}
  Clock::time_point next(Clock::time_point start) const { return start + every_ * (given_ + 1); }
  bool due(Clock::time_point start, Clock::time_point now) {
    if (now < next(start)) return false;
    given_ = static_cast<std::uint32_t>((now - start) / every_);
    return true;
  }
  std::int64_t waited_s(Clock::time_point start, Clock::time_point now) const {
    return std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
  }

 private:
  std::chrono::milliseconds every_;
  std::uint32_t given_ = 0;
};

// Rank 0's handshakes in flight and the ranks that joined so far.
struct JoiningRanks {
  const World& world;
  std::string_view token;
  std::chrono::milliseconds timeout;
  const Logger& log;
  std::vector<RendezvousChannel> peers;
  std::vector<Pending> pending{};
  // Each kind of drop from each host is logged once (a rank with the wrong token retries every
  // 100 ms), and counted for the timeout's error.
  std::set<std::string> logged{};
  std::uint32_t drops = 0;
  std::uint32_t joined = 1;  // rank 0 itself

  void drop(std::size_t i, std::string_view why) {
    const std::string& from = pending[i].from;
    if (logged.insert(fmt::format("{} {}", from.substr(0, from.rfind(':')), why)).second)
      log.warn(fmt::format("rendezvous: rank 0 dropped a connection from {}: {}", from, why));
    ++drops;
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  }

  // Handshake `i` after a poll: takes what arrived of its hello and, once all of it has, admits
  // it. Dropped when it is overdue or its peer left.
  Status progress(std::size_t i, short revents, Clock::time_point now) {
    Pending& p = pending[i];
    if ((revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
      if (now >= p.deadline) drop(i, fmt::format("no handshake within {} ms", kHandshakeTime.count()));
      return {};
    }
    const ssize_t n = ::recv(p.fd.get(), reinterpret_cast<char*>(&p.hello) + p.got, sizeof p.hello - p.got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return {};
    if (n <= 0) {
      drop(i, "it closed the connection before completing the handshake");
      return {};
    }
    p.got += static_cast<std::size_t>(n);
    if (p.got < sizeof p.hello) return {};
    return admit(i);
  }

  // Handshake `i` with its whole hello: a stranger is dropped; a rank that proves the token is
  // welcomed and joins, unless it disagrees with rank 0 about the world (an error).
  Status admit(std::size_t i) {
    Pending& p = pending[i];
    const Hello& hello = p.hello;
    if (hello.magic != kMagic || hello.version != kVersion) {
      drop(i, "it does not speak this version of qload's rendezvous");
      return {};
    }
    if (!detail::same_mac(hello.mac, joiner_proof(token, p.nonce, hello))) {
      drop(i, fmt::format("it claimed rank {} but did not prove the world token (a stranger, or a rank given "
                          "another QLOAD_WORLD_TOKEN)",
                          hello.rank));
      return {};
    }
    // Authenticated: it holds the token, so what it says about the world is a real
    // disagreement among the ranks, which fails the load.
    if (hello.size != world.size)
      return fail(Error(Errc::kInvalidArgument, fmt::format("rendezvous: rank {} says WORLD_SIZE is {}, rank 0 says {}",
                                                            hello.rank, hello.size, world.size)));
    if (hello.rank == 0 || hello.rank >= world.size || peers[hello.rank].fd)
      return fail(Error(Errc::kInvalidArgument,
                        fmt::format("rendezvous: two processes claim RANK {} of {}", hello.rank, world.size)));
    const Mac welcome = rank0_proof(token, p.nonce, hello);
    set_blocking(p.fd.get(), true);
    configure(p.fd.get(), timeout);
    if (!send_all(p.fd.get(), welcome.data(), welcome.size(), rank_name(hello.rank))) {
      drop(i, fmt::format("rank {} went away during the handshake", hello.rank));
      return {};
    }
    const std::uint32_t rank = hello.rank;
    peers[rank] = channel_of(std::move(p.fd), token, p.nonce, hello, true);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    ++joined;
    return {};
  }

  // A new connection on `listener`: it is sent its challenge and its handshake is pending (the
  // oldest pending one is dropped when there are too many).
  Status accept_one(const UniqueFd& listener, Clock::time_point now) {
    UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn) return {};  // the peer went away before we took it; it will retry
    Pending p{.fd = std::move(conn), .from = "", .nonce = {}, .deadline = now + kHandshakeTime, .hello = {}};
    p.from = peer_name(p.fd.get());
    QLOAD_ASSIGN_OR_RETURN(p.nonce, detail::fresh_nonce());
    const Challenge challenge{.nonce = p.nonce};
    // 44 bytes into a fresh socket's empty buffer: all of it is taken at once.
    if (::send(p.fd.get(), &challenge, sizeof challenge, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof challenge))
      return {};
    pending.push_back(std::move(p));
    if (pending.size() > kMaxPending) drop(0, fmt::format("{} handshakes were pending", kMaxPending));
    return {};
  }
};

// Rank 0: takes one authenticated connection per rank. Handshakes run side by side (poll), each
// bounded by kHandshakeTime, so strangers cost nothing but a log line.
Result<std::vector<RendezvousChannel>> accept_ranks(const World& world, std::string_view token,
                                                    std::chrono::milliseconds timeout, const Logger& log) {
  QLOAD_ASSIGN_OR_RETURN(const UniqueFd listener, listen_on_master_addr(world));
  JoiningRanks ranks{.world = world,
                     .token = token,
                     .timeout = timeout,
                     .log = log,
                     .peers = std::vector<RendezvousChannel>(world.size)};
  const Clock::time_point start = Clock::now(), deadline = start + timeout;
  WaitNotice notice(timeout);
  while (ranks.joined < world.size) {
    Clock::time_point wake = std::min(deadline, notice.next(start));
    for (const Pending& p : ranks.pending) wake = std::min(wake, p.deadline);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now());
    std::vector<pollfd> fds{{.fd = listener.get(), .events = POLLIN, .revents = 0}};
    for (const Pending& p : ranks.pending) fds.push_back({.fd = p.fd.get(), .events = POLLIN, .revents = 0});
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return fail(io_error("rendezvous: poll: " + errno_text(errno)));
    const Clock::time_point now = Clock::now();
    if (now >= deadline)
      return fail(io_error(fmt::format("rendezvous: rank 0 waited {} ms on {}, and {} of {} ranks joined{}",
                                       timeout.count(), where(world), ranks.joined, world.size,
                                       ranks.drops == 0 ? std::string()
                                                        : fmt::format(" ({} connections dropped, as logged: "
                                                                      "strangers, or ranks with another token)",
                                                                      ranks.drops))));
    if (notice.due(start, now))
      log.warn(
          fmt::format("rendezvous: rank 0 has waited {} s on {} and {} of {} ranks joined; it waits up to {} s "
                      "(QLOAD_RENDEZVOUS_TIMEOUT) for the others",
                      notice.waited_s(start, now), where(world), ranks.joined, world.size, timeout.count() / 1000));
    // Handshakes that made progress, newest first so that erasing keeps the indices valid.
    for (std::size_t i = ranks.pending.size(); i-- > 0;) QLOAD_TRY(ranks.progress(i, fds[i + 1].revents, now));
    if ((fds[0].revents & POLLIN) != 0) QLOAD_TRY(ranks.accept_one(listener, now));
  }
  return std::move(ranks.peers);
}

// The token this rank proves: the world's, else (one node) the one rank 0 wrote.
Result<std::string> joiner_token(const World& world) {
  if (!world.token.empty()) return world.token;
  return detail::read_auto_token(world);
}

constexpr std::string_view kDroppedHandshake = "rank 0 closed the connection during the handshake";

// One try at joining through a connected socket. nullopt with `why` set when the try failed in
// a way a later try may not (rank 0 not ready, or it dropped us); an error when rank 0 is not
// rank 0.
Result<std::optional<RendezvousChannel>> handshake(UniqueFd fd, const World& world, std::string& why) {
  Challenge challenge;
  if (!recv_all(fd.get(), &challenge, sizeof challenge, "rank 0")) {
    why = "it accepted the connection but sent no challenge";
    return std::optional<RendezvousChannel>();
  }
  if (challenge.magic != kMagic || challenge.version != kVersion) {
    why = "what listens there does not speak this version of qload's rendezvous";
    return std::optional<RendezvousChannel>();
  }
  Result<std::string> token = joiner_token(world);
  if (!token) {
    why = token.error().to_string();
    return std::optional<RendezvousChannel>();
  }
  Hello hello{.size = world.size, .rank = world.rank};
  QLOAD_ASSIGN_OR_RETURN(hello.nonce, detail::fresh_nonce());
  hello.mac = joiner_proof(*token, challenge.nonce, hello);
  Mac welcome{};
  if (!send_all(fd.get(), &hello, sizeof hello, "rank 0") ||
      !recv_all(fd.get(), welcome.data(), welcome.size(), "rank 0")) {
    why = std::string(kDroppedHandshake) +
          ": it did not accept this rank's token (is QLOAD_WORLD_TOKEN the same on every rank?)";
    return std::optional<RendezvousChannel>();
  }
  if (!detail::same_mac(welcome, rank0_proof(*token, challenge.nonce, hello)))
    return fail(Error(Errc::kPermissionDenied,
                      fmt::format("rendezvous: the process listening at {} did not prove the world token: it is not "
                                  "rank 0 of this world (another program on the port, or its QLOAD_WORLD_TOKEN "
                                  "differs)",
                                  where(world))));
  return std::optional<RendezvousChannel>(channel_of(std::move(fd), *token, challenge.nonce, hello, false));
}

// Any other rank: connects to rank 0 and joins, retrying until it listens and accepts this
// rank, or the deadline passes.
Result<RendezvousChannel> connect_to_rank0(const World& world, std::chrono::milliseconds timeout, const Logger& log) {
  const Clock::time_point start = Clock::now(), deadline = start + timeout;
  WaitNotice notice(timeout);
  const std::string port = std::to_string(world.master_port);
  std::string last_error = "no address";
  std::string refused;  // why rank 0 dropped this rank's handshake, if it ever did
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(world.master_addr.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) {
      last_error = ::gai_strerror(rc);
    } else {
      UniqueFd connected;
      for (addrinfo* a = found; a != nullptr && !connected; a = a->ai_next) {
        UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (!fd) continue;
        if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0)
          connected = std::move(fd);
        else
          last_error = errno_text(errno);
      }
      ::freeaddrinfo(found);
      if (connected) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        configure(connected.get(), std::clamp(left, std::chrono::milliseconds(1), kHandshakeTime));
        QLOAD_ASSIGN_OR_RETURN(std::optional<RendezvousChannel> joined,
                               handshake(std::move(connected), world, last_error));
        if (joined) {
          configure(joined->fd.get(), timeout);
          return std::move(*joined);
        }
        if (last_error.starts_with(kDroppedHandshake)) refused = last_error;
      }
    }
    if (Clock::now() >= deadline)
      return fail(io_error(fmt::format("rendezvous: rank {} could not join rank 0 at {} within {} ms: {}{}", world.rank,
                                       where(world), timeout.count(), last_error,
                                       refused.empty() || refused == last_error ? "" : "; before that, " + refused)));
    if (notice.due(start, Clock::now()))
      log.warn(fmt::format(
          "rendezvous: rank {} has tried {} s to join rank 0 at {} ({}); it tries up to {} s "
          "(QLOAD_RENDEZVOUS_TIMEOUT)",
          world.rank, notice.waited_s(start, Clock::now()), where(world), last_error, timeout.count() / 1000));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 may not listen yet
  }
}

}  // namespace

Result<Rendezvous> Rendezvous::join(const World& world, std::chrono::milliseconds timeout, const Logger& log) {
  if (world.size == 0 || world.rank >= world.size)
    return fail(Error(Errc::kInvalidArgument, fmt::format("rank {} of a world of {}", world.rank, world.size)));
  if (world.size == 1) return Rendezvous(world, timeout, {});  // alone: nobody to meet
  if (world.token.empty() && !world.one_node())
    return fail(Error(Errc::kInvalidArgument,
                      "rendezvous: a world over several nodes needs a token (QLOAD_WORLD_TOKEN or "
                      "QLOAD_WORLD_TOKEN_FILE, the same on every rank)"));
  if (world.rank == 0) {
    // A one-node world without a token makes one, in a file the other ranks (this user's
    // processes) can read and nobody else can; it goes once everyone has joined.
    std::optional<detail::AutoTokenFile> made;
    if (world.token.empty()) {
      QLOAD_ASSIGN_OR_RETURN(made, detail::AutoTokenFile::create(world));
    }
    const std::string_view token = made ? std::string_view(made->token()) : std::string_view(world.token);
    QLOAD_ASSIGN_OR_RETURN(std::vector<RendezvousChannel> peers, accept_ranks(world, token, timeout, log));
    return Rendezvous(world, timeout, std::move(peers));
  }
  QLOAD_ASSIGN_OR_RETURN(RendezvousChannel rank0, connect_to_rank0(world, timeout, log));
  std::vector<RendezvousChannel> peers;
  peers.push_back(std::move(rank0));
  return Rendezvous(world, timeout, std::move(peers));
}

Result<std::vector<std::string>> Rendezvous::allgather(std::string_view mine) {
  return allgather(mine, timeout_);
}

Result<std::vector<std::string>> Rendezvous::allgather(std::string_view mine, std::chrono::milliseconds wait) {
  for (RendezvousChannel& peer : peers_)
    if (peer.fd) set_timeout(peer.fd.get(), wait);
  if (mine.size() > kMaxMessage)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("a {} byte rendezvous message (at most {})", mine.size(), kMaxMessage)));
  std::vector<std::string> all(world_.size);
  if (world_.size == 1) {
    all[0] = std::string(mine);
    return all;
  }
  if (world_.rank != 0) {
    // Rank 0 answers once it has every rank's message, after waiting up to `wait` for the
    // slowest: wait twice as long for it, so that its verdict on a late rank arrives first.
    if (wait.count() > 0) set_timeout(peers_[0].fd.get(), 2 * wait);
    QLOAD_TRY(send_message(peers_[0], mine, "rank 0"));
    for (std::uint32_t r = 0; r < world_.size; ++r) {
      QLOAD_ASSIGN_OR_RETURN(all[r], recv_message(peers_[0], "rank 0"));
    }
    return all;
  }
  all[0] = std::string(mine);
  for (std::uint32_t r = 1; r < world_.size; ++r) {
    Result<std::string> received = recv_message(peers_[r], rank_name(r));
    if (!received) {
      // The others would only see this rank's socket close: tell them which rank it was.
      const std::string why = received.error().to_string();
      for (std::uint32_t q = 1; q < world_.size; ++q)
        if (q != r && peers_[q].fd) (void)send_message(peers_[q], why, rank_name(q), /*abort=*/true);
      return fail(std::move(received.error()));
    }
    all[r] = std::move(*received);
  }
  for (std::uint32_t r = 1; r < world_.size; ++r)
    for (const std::string& message : all) QLOAD_TRY(send_message(peers_[r], message, rank_name(r)));
  return all;
}

}  // namespace qload::distributed
