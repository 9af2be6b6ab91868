// The processes of one multi-process load meet over TCP, with no other service: rank 0 listens
// on MASTER_ADDR:MASTER_PORT, every other rank connects to it (retrying until the deadline,
// since rank 0 may start later) and says which rank of which world it is. After that,
// allgather() exchanges one message per rank, through rank 0. qload uses it to check that every
// rank planned the same load, to hand out NCCL's unique id, and to learn every rank's outcome,
// so that a load fails everywhere if it fails anywhere; alltoall() carries the bytes of shared
// reads between processes on cpu devices.
//
// A rank that dies closes its socket: the others' next allgather fails naming it instead of
// waiting (TCP keepalive notices a node that vanished). Joining is bounded by the timeout, and
// so is each exchange unless it asks to wait as long as the slowest rank takes.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qload/dist/world.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace qload {

class Rendezvous {
 public:
  // Joins `world`'s rendezvous. Rank 0 waits for the other size - 1 ranks; the others connect.
  // kIo naming the address and rank when it cannot be reached or the deadline passes;
  // kInvalidArgument when two ranks claim the same number or disagree on the world's size.
  static Result<Rendezvous> join(const World& world, std::chrono::milliseconds timeout);

  Rendezvous(Rendezvous&&) noexcept = default;
  Rendezvous& operator=(Rendezvous&&) noexcept = default;

  // Every rank's `mine`, indexed by rank (this rank's own included). Every rank must call it
  // the same number of times; messages up to 64 MiB. `wait`: how long to wait for the other
  // ranks' messages (the join's timeout by default; zero: no limit, e.g. while the others
  // are still loading).
  Result<std::vector<std::string>> allgather(std::string_view mine);
  Result<std::vector<std::string>> allgather(std::string_view mine, std::chrono::milliseconds wait);

  // Every rank sends `to_each[q]` to rank q (to_each has one message per rank, its own
  // included) and gets, indexed by rank, the message each rank sent it. Through rank 0, like
  // allgather, but each message goes only where it is addressed.
  Result<std::vector<std::string>> alltoall(std::span<const std::string_view> to_each);

  const World& world() const noexcept { return world_; }

 private:
  Rendezvous(World world, std::chrono::milliseconds timeout, std::vector<UniqueFd> peers)
      : world_(std::move(world)), timeout_(timeout), peers_(std::move(peers)) {}

  World world_;
  std::chrono::milliseconds timeout_;
  // Rank 0: peers_[r] is rank r's connection (peers_[0] unused). Others: peers_[0] is rank 0.
  std::vector<UniqueFd> peers_;
};

}  // namespace qload
