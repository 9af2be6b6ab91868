// The processes of one multi-process load meet over TCP, with no other service: rank 0 listens
// on MASTER_ADDR:MASTER_PORT (that address only, not every interface), every other rank connects
// to it (retrying until the deadline, since rank 0 may start later) and says which rank of which
// world it is. After that, allgather() exchanges one message per rank, through rank 0. qload uses
// it to check that every rank planned the same load, to hand out NCCL's unique id, and to learn
// every rank's outcome, so that a load fails everywhere if it fails anywhere, and to exchange
// the addresses Gloo and NCCL connect with. Checkpoint bytes never go through it: they move
// through Gloo (host memory) or NCCL (GPU memory), communicator.hpp.
//
// Every connection is authenticated both ways with the world's token (World::token; a one-node
// world without one makes its own, shared through a file only this user can read): rank 0 sends
// a fresh nonce, the joining rank answers with its own nonce and an HMAC-SHA256 over both nonces
// and its rank under the token, and rank 0 proves the token back the same way; the secret never
// crosses the wire. Every later message carries an HMAC under a key of that connection and
// direction over a sequence number, so nothing can be forged, replayed, reordered or reflected.
// A connection that does not prove the token (a port scanner, a stranger's hello, a rank with
// another token) is dropped and logged while rank 0 goes on waiting for the real ranks; a rank 0
// that does not prove it is refused by name.
//
// A rank that dies closes its socket: the others' next allgather fails naming it instead of
// waiting (TCP keepalive notices a node that vanished). Joining is bounded by the timeout, and
// so is each exchange (by the join's, or its own). When rank 0 finds a rank gone or late, it
// tells every other rank which one before leaving (an authenticated abort notice), so every
// rank's error names the rank at fault.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qload/distributed/world.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace qload::distributed {

namespace detail {
// One authenticated connection: a key and a message count per direction (rendezvous.cpp).
struct RendezvousChannel {
  UniqueFd fd;
  std::string send_key, receive_key;
  std::uint64_t sent = 0, received = 0;
};
}  // namespace detail

class Rendezvous {
 public:
  // Joins `world`'s rendezvous. Rank 0 waits for the other size - 1 ranks; the others connect.
  // kIo naming the address and rank when it cannot be reached or the deadline passes (or rank 0
  // cannot listen on MASTER_ADDR's port); kInvalidArgument when two authenticated ranks claim the
  // same number or disagree on the world's size; kPermissionDenied when what answers at
  // MASTER_ADDR does not prove the world's token. Dropped strangers are logged to `log`.
  static Result<Rendezvous> join(const World& world, std::chrono::milliseconds timeout, const Logger& log = {});

  Rendezvous(Rendezvous&&) noexcept = default;
  Rendezvous& operator=(Rendezvous&&) noexcept = default;

  // Every rank's `mine`, indexed by rank (this rank's own included). Every rank must call it
  // the same number of times; messages up to 64 MiB. `wait`: how long to wait for the other
  // ranks' messages (the join's timeout by default; zero: no limit, e.g. while the others
  // are still loading).
  Result<std::vector<std::string>> allgather(std::string_view mine);
  Result<std::vector<std::string>> allgather(std::string_view mine, std::chrono::milliseconds wait);

  const World& world() const noexcept { return world_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }

 private:
  Rendezvous(World world, std::chrono::milliseconds timeout, std::vector<detail::RendezvousChannel> peers)
      : world_(std::move(world)), timeout_(timeout), peers_(std::move(peers)) {}

  World world_;
  std::chrono::milliseconds timeout_;
  // Rank 0: peers_[r] is rank r's connection (peers_[0] unused). Others: peers_[0] is rank 0.
  std::vector<detail::RendezvousChannel> peers_;
};

}  // namespace qload::distributed
