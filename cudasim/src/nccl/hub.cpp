// The hub of one simulated NCCL clique (wire.hpp): gathers the ranks, checks that they agree
// on the clique and on every collective, and relays each broadcast from its root to the
// others. A rank that leaves while others still expect it (aborted, destroyed early, its
// process gone) fails every collective the others issue, as a real clique would.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <vector>

#include "nccl.h"
#include "wire.hpp"

namespace qload::cudasim::nccl {
namespace {

constexpr int kJoinTimeoutMs = 600'000;  // a clique nobody completes is given up after this
constexpr std::size_t kRelayPiece = std::size_t{4} << 20;

struct Member {
  int fd = -1;
  Hello hello;
  bool gone = false;
};

class Hub {
 public:
  explicit Hub(int listen_fd) : listen_fd_(listen_fd) {}
  ~Hub() {
    ::close(listen_fd_);
    for (Member& m : members_) ::close(m.fd);
  }

  void serve() {
    if (!gather()) return;
    ::close(listen_fd_);
    listen_fd_ = -1;
    for (Member& m : members_) (void)send_reply(m, ncclSuccess, "");
    for (std::uint64_t seq = 1;; ++seq)
      if (!collective(seq)) return;
  }

 private:
  bool send_reply(Member& m, int status, const std::string& why) {
    const Reply r = make_reply(status, why);
    return send_all(m.fd, &r, sizeof r);
  }

  void fail_all(int status, const std::string& why) {
    for (Member& m : members_)
      if (!m.gone) (void)send_reply(m, status, why);
  }

  // Accepts ranks until the clique is complete; false (everyone told why) if it cannot be.
  bool gather() {
    int nranks = -1;
    while (nranks < 0 || members_.size() < static_cast<std::size_t>(nranks)) {
      std::vector<pollfd> fds{{.fd = listen_fd_, .events = POLLIN, .revents = 0}};
      for (const Member& m : members_) fds.push_back({.fd = m.fd, .events = POLLIN, .revents = 0});
      const int ready = ::poll(fds.data(), fds.size(), kJoinTimeoutMs);
      if (ready <= 0) {
        fail_all(ncclSystemError, "the clique was not complete after 10 minutes");
        return false;
      }
      for (std::size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents != 0) {  // a joined rank said something or left before the others came
          members_[i - 1].gone = true;
          fail_all(ncclRemoteError,
                   fmt::format("rank {} left before the communicator was complete", members_[i - 1].hello.rank));
          return false;
        }
      if ((fds[0].revents & POLLIN) == 0) continue;
      Member m;
      m.fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (m.fd < 0) continue;
      if (!recv_all(m.fd, &m.hello, sizeof m.hello) || m.hello.magic != kHelloMagic) {
        ::close(m.fd);
        continue;
      }
      members_.push_back(m);
      const Hello& h = m.hello;
      std::string wrong;
      if (nranks < 0) nranks = h.nranks;
      if (h.nranks != nranks)
        wrong = fmt::format("rank {} joined a clique of {} ranks, rank {} one of {}", h.rank, h.nranks,
                            members_.front().hello.rank, nranks);
      else if (h.rank < 0 || h.rank >= nranks)
        wrong = fmt::format("rank {} is outside a clique of {} ranks", h.rank, nranks);
      else if (std::count_if(members_.begin(), members_.end(),
                             [&](const Member& o) { return o.hello.rank == h.rank; }) > 1)
        wrong = fmt::format("rank {} joined twice", h.rank);
      if (!wrong.empty()) {
        fail_all(ncclInvalidUsage, wrong);
        return false;
      }
    }
    std::sort(members_.begin(), members_.end(),
              [](const Member& a, const Member& b) { return a.hello.rank < b.hello.rank; });
    return true;
  }

  // One collective: every live rank's header, then the relay. False once nobody is left or the
  // clique is broken (everyone still there was told).
  bool collective(std::uint64_t seq) {
    std::vector<std::optional<OpHeader>> headers(members_.size());
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<std::size_t> who;
      for (std::size_t i = 0; i < members_.size(); ++i)
        if (!members_[i].gone && !headers[i]) {
          fds.push_back({.fd = members_[i].fd, .events = POLLIN, .revents = 0});
          who.push_back(i);
        }
      if (fds.empty()) break;
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      for (std::size_t k = 0; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        Member& m = members_[who[k]];
        OpHeader h;
        if (recv_all(m.fd, &h, sizeof h))
          headers[who[k]] = h;
        else
          m.gone = true;  // destroyed or aborted: fine if everyone is leaving
      }
    }
    const auto left = std::find_if(members_.begin(), members_.end(), [](const Member& m) { return m.gone; });
    if (left == members_.end()) return relay(seq, headers);
    fail_all(ncclRemoteError, fmt::format("collective {}: rank {} has left the communicator (aborted, destroyed "
                                          "or its process ended)",
                                          seq, left->hello.rank));
    return std::any_of(members_.begin(), members_.end(), [](const Member& m) { return !m.gone; }) &&
           wait_for_everyone_to_leave();
  }

  // A broken clique: the ranks still there will abort; nothing more is relayed.
  bool wait_for_everyone_to_leave() {
    for (Member& m : members_) {
      char byte;
      while (!m.gone)
        if (::recv(m.fd, &byte, 1, 0) <= 0) m.gone = true;
    }
    return false;
  }

  bool relay(std::uint64_t seq, const std::vector<std::optional<OpHeader>>& headers) {
    const OpHeader& first = *headers[0];
    for (std::size_t i = 0; i < headers.size(); ++i) {
      const OpHeader& h = *headers[i];
      if (h.seq != seq || h.kind != first.kind || h.root != first.root || h.bytes != first.bytes) {
        fail_all(ncclInvalidUsage,
                 fmt::format("collective {}: rank {} issued a broadcast of {} bytes from rank {} where rank 0 "
                             "issued one of {} bytes from rank {}",
                             seq, i, h.bytes, h.root, first.bytes, first.root));
        return wait_for_everyone_to_leave();
      }
    }
    if (first.root < 0 || static_cast<std::size_t>(first.root) >= members_.size()) {
      fail_all(ncclInvalidArgument, fmt::format("collective {}: root {} is not a rank", seq, first.root));
      return wait_for_everyone_to_leave();
    }
    Member& root = members_[static_cast<std::size_t>(first.root)];
    for (Member& m : members_)
      if (&m != &root && !send_reply(m, ncclSuccess, "")) m.gone = true;
    std::vector<std::byte> piece(std::min<std::uint64_t>(kRelayPiece, first.bytes));
    for (std::uint64_t done = 0; done < first.bytes;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), first.bytes - done));
      if (!recv_all(root.fd, piece.data(), n)) {
        // The receivers are mid-payload: closing their sockets is the only way to tell them.
        for (Member& m : members_) ::shutdown(m.fd, SHUT_RDWR);
        return false;
      }
      for (Member& m : members_)
        if (&m != &root && !m.gone && !send_all(m.fd, piece.data(), n)) m.gone = true;
      done += n;
    }
    (void)send_reply(root, ncclSuccess, "");
    return true;
  }

  int listen_fd_;
  std::vector<Member> members_;
};

}  // namespace

void start_hub(int listen_fd) {
  std::thread([listen_fd] { Hub(listen_fd).serve(); }).detach();
}

}  // namespace qload::cudasim::nccl
