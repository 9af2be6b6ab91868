// Shared reads (ParallelLayout::share_reads): the copies each process reads for the others
// travel while the load goes on, through the communicator (Gloo for host memory).
//
// Every process lists the same moves from the plan, one per copy a process receives, from the
// tensor's reader: under SharedReads::kBroadcast the reader's own copy, straight from its
// arena (replicas hold identical arenas); under SharedReads::kRelay the copy the reader cut
// into its relay arena as it read. A receiver gets a host copy straight into its arena, a
// GPU-bound one into host memory first (finish() puts it in place). Receives are posted before
// the reads start; the reader sends a tensor's copies from a task of its read graph once the
// tensor is in place there; finish() waits for everything once every process has read.
// Destroying the exchange cancels what is in flight, so it must go before the arenas it points
// into (a failed load releases them after it).
//
// A failure to post or send (a peer gone) does not stop this process's reads: it is kept, and
// the process passes the barrier as failed, where the rendezvous names the rank that is gone
// (a process failing at once would be gone itself, and blamed by the next).
//
// GPU copies under SharedReads::kBroadcast go through NCCL after the load (broadcast_gpu_copies).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "exec/arena_target.hpp"
#include "qload/distributed/communicator.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

class SharedExchange {
 public:
  // Lists the moves and posts this process's receives. Every process calls it together.
  static Result<SharedExchange> start(const Plan& plan, std::span<const std::unique_ptr<ArenaTarget>> targets,
                                      distributed::Communicator& communicator);
  SharedExchange(SharedExchange&& other) noexcept;

  // [catalog tensor]: this process sends copies of it once its bytes are in place here.
  const std::vector<bool>& sends() const noexcept { return sends_; }
  // Issues tensor `tensor`'s sends (none after a failure). Thread-safe.
  void send(std::uint32_t tensor);
  // The first failure to post or send, if any.
  Status status() const;
  // Once every process has read: waits for every move of this process, then puts GPU-bound
  // copies in place. Returns the bytes this process received.
  Result<std::uint64_t> finish(std::span<const std::unique_ptr<ArenaTarget>> targets);

 private:
  // A received copy bound for a GPU arena, kept in host memory until finish().
  struct Inbox {
    std::vector<std::byte> bytes;
    std::uint32_t region = 0;
    std::uint64_t offset = 0;
    DType dtype = DType::kU8;  // as placed
  };

  SharedExchange() = default;
  void failed(Error error);

  std::uint32_t rank_ = 0;
  std::vector<distributed::HostMove> moves_;
  std::vector<bool> sends_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> moves_of_;  // [tensor]: its moves, [first, last)
  std::vector<Inbox> inboxes_;  // each one's bytes stay where they are as the vector grows
  std::uint64_t received_bytes_ = 0;
  mutable std::mutex failure_mutex_;
  std::optional<Error> failure_;
  distributed::PostedMoves posted_;  // declared last, so cancelled before the inboxes go
};

}  // namespace qload::scheduler::detail
