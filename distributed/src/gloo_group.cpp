#include "gloo_group.hpp"

#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "qload/runtime/unique_fd.hpp"

namespace qload::distributed::detail {
namespace {

// A gloo::Context whose pairs are made and connected here, with the addresses exchanged over
// qload's authenticated rendezvous instead of a Gloo store (Gloo's own rendezvous would trust
// whatever a store hands it).
class MeshContext : public gloo::Context {
 public:
  using gloo::Context::Context;
  void adopt(std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

// Gloo writes to its sockets with writev, which raises SIGPIPE when the peer is gone, and the
// default action ends the process: a rank would die of another rank's death instead of
// failing with an error naming it. A library must not change the process's signal handling,
// so each thread that calls into Gloo blocks SIGPIPE for the call (the write then fails with
// EPIPE, which Gloo reports), and takes back any SIGPIPE the call raised before unblocking it.
// Gloo's own I/O thread, started while the mesh is made, inherits the blocked mask for good.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;
  ~SigpipeBlocked() {
    if (!was_pending_) {
      const timespec now{};
      while (sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
};

// The address of this machine on the route to MASTER_ADDR: the interface the other ranks can
// reach (rank 0's is MASTER_ADDR itself), where Gloo listens.
Result<std::string> local_address_towards(const World& world) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(world.master_port);
  if (const int rc = ::getaddrinfo(world.master_addr.c_str(), port.c_str(), &hints, &found); rc != 0)
    return fail(Errc::kIo, fmt::format("Gloo: resolving MASTER_ADDR {}: {}", world.master_addr, ::gai_strerror(rc)));
  std::string address;
  for (addrinfo* a = found; a != nullptr && address.empty(); a = a->ai_next) {
    // Connecting a UDP socket sends nothing: it only asks the kernel for the route.
    const UniqueFd fd(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    char host[NI_MAXHOST];
    if (fd && ::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&local), length, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0)
      address = host;
  }
  ::freeaddrinfo(found);
  if (address.empty())
    return fail(Errc::kIo, fmt::format("Gloo: no local address routes to MASTER_ADDR {}", world.master_addr));
  return address;
}

// Rank r's message: for each other rank, in order, a 4-byte length and the address of r's pair
// for it. The entry for `rank`, or empty if the message is malformed.
std::vector<char> address_for(const std::string& message, std::uint32_t sender, std::uint32_t rank,
                              std::uint32_t size) {
  std::size_t at = 0;
  for (std::uint32_t peer = 0; peer < size; ++peer) {
    if (peer == sender) continue;
    std::uint32_t length = 0;
    if (message.size() - at < sizeof length) return {};
    std::memcpy(&length, message.data() + at, sizeof length);
    at += sizeof length;
    if (message.size() - at < length) return {};
    if (peer == rank) return std::vector<char>(message.data() + at, message.data() + at + length);
    at += length;
  }
  return {};
}

}  // namespace

struct GlooGroup {
  std::shared_ptr<MeshContext> context;
  std::uint32_t rank = 0;
  std::chrono::milliseconds timeout{0};  // zero: no limit
  std::uint64_t next_slot = 0;           // every rank makes the same calls, so the same slots
};

void GlooGroupDeleter::operator()(GlooGroup* group) const noexcept {
  delete group;
}

Result<GlooGroupPtr> make_gloo_group(Rendezvous& rendezvous, std::chrono::milliseconds timeout) {
  const World& world = rendezvous.world();
  QLOAD_ASSIGN_OR_RETURN(const std::string host, local_address_towards(world));
  const auto rank = static_cast<int>(world.rank), size = static_cast<int>(world.size);
  GlooGroupPtr group(new GlooGroup{.context = nullptr, .rank = world.rank, .timeout = timeout});
  int connecting = size;       // the peer being connected, for errors
  const SigpipeBlocked quiet;  // also for Gloo's I/O thread, which starts here
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    group->context = std::make_shared<MeshContext>(rank, size);
    // Gloo has no "no limit": a year stands for it.
    group->context->setTimeout(timeout.count() > 0 ? timeout : std::chrono::hours(24 * 365));
    std::shared_ptr<gloo::transport::Context> transport = device->createContext(rank, size);
    transport->setTimeout(group->context->getTimeout());
    std::string mine;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      const std::vector<char> address = transport->createPair(peer)->address().bytes();
      const auto length = static_cast<std::uint32_t>(address.size());
      mine.append(reinterpret_cast<const char*>(&length), sizeof length);
      mine.append(address.begin(), address.end());
    }
    QLOAD_ASSIGN_OR_RETURN(const std::vector<std::string> all, rendezvous.allgather(mine));
    for (connecting = 0; connecting < size; ++connecting) {
      if (connecting == rank) continue;
      const std::vector<char> address = address_for(all[static_cast<std::size_t>(connecting)],
                                                    static_cast<std::uint32_t>(connecting), world.rank, world.size);
      if (address.empty())
        return fail(Errc::kInvalidArgument, fmt::format("Gloo: rank {} sent no address for rank {}", connecting, rank));
      transport->getPair(connecting)->connect(address);
    }
    group->context->adopt(std::move(device), std::move(transport));
  } catch (const std::exception& e) {
    return fail(Errc::kIo, fmt::format("rank {}: connecting Gloo's mesh on {}{}: {}", rank, host,
                                       connecting < size ? fmt::format(" to rank {}", connecting) : "", e.what()));
  }
  return group;
}

struct GlooExchange {
  GlooGroup* group = nullptr;
  std::vector<HostMove> moves;
  std::uint64_t first_slot = 0;
  // [move]: this rank's buffer for it (null for a move it is not in). Destroyed with the
  // exchange: Gloo holds only weak references, so a cancelled receive writes nowhere.
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers;
  std::mutex issuing;        // sends come from any thread
  std::vector<char> issued;  // [move]: its send was issued here
};

void GlooExchangeDeleter::operator()(GlooExchange* exchange) const noexcept {
  delete exchange;
}

namespace {

bool sends(const GlooExchange& x, const HostMove& m) {
  return m.from == x.group->rank;
}

std::string failed(const GlooExchange& x, const HostMove& m, const std::exception& e) {
  return fmt::format("rank {}: {} rank {} through Gloo: {}", x.group->rank,
                     sends(x, m) ? "sending to" : "receiving from", sends(x, m) ? m.to : m.from, e.what());
}

}  // namespace

Result<GlooExchangePtr> gloo_post(GlooGroup& group, std::vector<HostMove> moves) {
  const SigpipeBlocked quiet;
  GlooExchangePtr x(new GlooExchange{.group = &group, .moves = std::move(moves), .first_slot = group.next_slot});
  group.next_slot += x->moves.size();
  x->buffers.resize(x->moves.size());
  x->issued.assign(x->moves.size(), 0);
  bool mine = false;
  for (std::size_t i = 0; i < x->moves.size(); ++i) {
    const HostMove& m = x->moves[i];
    if (m.bytes.empty() || m.from == m.to || (m.from != group.rank && m.to != group.rank)) continue;
    mine = true;
    try {
      x->buffers[i] = group.context->createUnboundBuffer(m.bytes.data(), m.bytes.size());
      if (!sends(*x, m)) x->buffers[i]->recv(static_cast<int>(m.from), x->first_slot + i);
    } catch (const std::exception& e) {
      return fail(Errc::kIo, failed(*x, m, e));
    }
  }
  if (!mine) return GlooExchangePtr();
  return x;
}

Status gloo_send(GlooExchange& x, std::size_t i) {
  if (i >= x.moves.size() || !x.buffers[i] || !sends(x, x.moves[i]))
    return fail(Errc::kInternal, fmt::format("rank {} does not send move {} of {}", x.group->rank, i, x.moves.size()));
  const std::lock_guard lock(x.issuing);
  if (x.issued[i] != 0) return fail(Errc::kInternal, fmt::format("move {} was sent twice", i));
  const SigpipeBlocked quiet;
  try {
    x.buffers[i]->send(static_cast<int>(x.moves[i].to), x.first_slot + i);
  } catch (const std::exception& e) {
    return fail(Errc::kIo, failed(x, x.moves[i], e));
  }
  x.issued[i] = 1;
  return {};
}

Status gloo_finish(GlooExchange& x) {
  const SigpipeBlocked quiet;
  const std::chrono::milliseconds wait = x.group->context->getTimeout();
  for (std::size_t i = 0; i < x.moves.size(); ++i) {
    if (!x.buffers[i]) continue;
    const HostMove& m = x.moves[i];
    if (sends(x, m) && x.issued[i] == 0)
      return fail(Errc::kInternal, fmt::format("rank {} never sent move {} (to rank {})", x.group->rank, i, m.to));
    try {
      if (sends(x, m)) {
        x.buffers[i]->waitSend(nullptr, wait);
      } else {
        x.buffers[i]->waitRecv(nullptr, wait);
      }
    } catch (const std::exception& e) {
      return fail(Errc::kIo, failed(x, m, e));
    }
  }
  return {};
}

}  // namespace qload::distributed::detail
