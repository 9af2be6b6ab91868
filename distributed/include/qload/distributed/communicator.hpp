// Moves bytes between the processes of a multi-process load: one rank's buffers to every rank
// (broadcast), one rank's host bytes split between ranks (scatter), and a barrier that carries
// success. Host memory goes through Gloo (TCP, straight from the sender to each receiver, over a
// mesh whose addresses the authenticated rendezvous exchanged); GPU memory through NCCL, one
// communicator per device slot (slot k joins device k of every process). NCCL is opened at run
// time; without it, GPU buffers are refused, as host buffers are in a build without Gloo. The
// rendezvous itself carries only small control messages (allgather, all_ok).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "qload/distributed/rendezvous.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/settings.hpp"

namespace qload::distributed {

// How long its operations may wait (the settings of the same names).
struct CommunicatorTimeouts {
  std::chrono::milliseconds nccl = Settings{}.nccl_timeout;
  // all_ok: how long a rank waits for the slowest; zero: no limit.
  std::chrono::milliseconds straggler = Settings{}.straggler_timeout;
};

// A range of host memory moving from rank `from` to rank `to`: `bytes` is what `from` sends and
// where `to` receives it (the same size on both; Gloo only reads a buffer it sends). Other ranks
// pass it too and ignore it.
struct HostMove {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  std::span<std::byte> bytes;
};

struct BroadcastBuffer {
  std::span<std::byte> bytes;
  bool on_device = false;  // GPU memory (of the slot's device)
  std::uint32_t slot = 0;  // which of this process's devices holds it
};

namespace detail {
struct NcclGroup;  // the NCCL communicators and streams, per slot (nccl_group.cpp)
struct NcclGroupDeleter {
  void operator()(NcclGroup* group) const noexcept;
};
struct GlooGroup;  // the Gloo mesh for host memory (gloo_group.cpp)
struct GlooGroupDeleter {
  void operator()(GlooGroup* group) const noexcept;
};
struct GlooExchange;  // moves in flight (gloo_group.cpp)
struct GlooExchangeDeleter {
  void operator()(GlooExchange* exchange) const noexcept;
};
}  // namespace detail

// Host moves issued over a stretch of time and finished together (Communicator::post_moves), so
// that bytes travel while the load goes on: this rank's receives are posted when it is made, each
// of its sends when its bytes are ready (send(i), from any thread), and finish() waits for them
// all. Destroying it cancels whatever is still in flight: from then on Gloo touches none of the
// moves' buffers, so it must go before they do (a failed load releases its arenas after it).
class PostedMoves {
 public:
  PostedMoves() = default;  // moves nothing
  PostedMoves(PostedMoves&&) noexcept = default;
  PostedMoves& operator=(PostedMoves&&) noexcept = default;

  // Issues move `i` of the list (this rank must be its sender). Thread-safe.
  Status send(std::size_t i);
  // Waits for every receive and every send of this rank, each up to the mesh's timeout; a move
  // this rank sends that was never issued is kInternal.
  Status finish();

 private:
  friend class Communicator;
  explicit PostedMoves(std::unique_ptr<detail::GlooExchange, detail::GlooExchangeDeleter> gloo)
      : gloo_(std::move(gloo)) {}
  std::unique_ptr<detail::GlooExchange, detail::GlooExchangeDeleter> gloo_;  // null: nothing of this rank's
};

class Communicator {
 public:
  // Over `rendezvous` (borrowed: it must outlive the communicator). `gpu_slots[k]` is the CUDA
  // device of this process's slot k, or -1 for a host slot; with any GPU slot, NCCL
  // communicators are made for them, which every rank must do alike. kUnsupported when NCCL
  // is missing; kDevice naming the slot when NCCL fails. `timeouts.nccl` bounds the creation
  // and each broadcast of GPU memory: past it (or on an NCCL error) every communicator is
  // aborted and the call fails naming this rank and the operation.
  //
  // `nccl_comms`: a server's own NCCL communicators (ncclComm_t), one per slot, null for a host
  // slot, used instead of making new ones (no second NCCL world, no extra GPU memory). Each must
  // span the world's ranks as the world numbers them, on its slot's device (checked:
  // kInvalidArgument naming the slot); every rank hands its own or none. qload never destroys
  // them, but aborts them (ncclCommAbort) when a broadcast on them fails or passes the timeout,
  // as torch's watchdog does: a collective still running would write into memory the failed
  // load releases.
  static Result<Communicator> create(Rendezvous& rendezvous, std::span<const int> gpu_slots,
                                     const CommunicatorTimeouts& timeouts = {}, std::span<void* const> nccl_comms = {});

  Communicator(Communicator&&) noexcept = default;
  Communicator& operator=(Communicator&&) noexcept = default;

  std::uint32_t rank() const noexcept { return rendezvous_->world().rank; }
  std::uint32_t size() const noexcept { return rendezvous_->world().size; }

  // Every rank's `mine`, indexed by rank (small messages: addresses, flags).
  Result<std::vector<std::string>> allgather(std::string_view mine) { return rendezvous_->allgather(mine); }

  // A barrier carrying one bit: true when every rank passed true. Waits for the slowest rank
  // up to the straggler timeout; an error naming the rank that is gone or late.
  Result<bool> all_ok(bool ok);

  // Every rank calls it with buffers of the same sizes and slots, in the same order; when it
  // returns, each holds rank `root`'s bytes.
  Status broadcast(std::span<const BroadcastBuffer> buffers, std::uint32_t root);

  // Host memory delivered point to point: every rank passes the same list in the same order (a
  // move's place in it tags its bytes), and sends or receives the moves it is in. All are issued
  // at once and then waited for, so transfers overlap, both ways. Through Gloo.
  Status move(std::span<const HostMove> moves);

  // The same, issued over time: every rank passes the same list in the same order; this rank's
  // receives are posted now, its sends when it calls PostedMoves::send. The buffers must
  // outlive the result.
  Result<PostedMoves> post_moves(std::vector<HostMove> moves);

  // Rank `root` sends `parts[q]` to each rank q (parts is read on the root only, and its own
  // entry ignored); every other rank receives its part into `mine`. `sizes[q]` is rank q's
  // part's size, the same on every rank (so each knows how many pieces to wait for). Host
  // memory, through Gloo.
  Status scatter(std::span<const std::uint64_t> sizes, std::span<const std::span<const std::byte>> parts,
                 std::span<std::byte> mine, std::uint32_t root);

 private:
  Communicator(Rendezvous& rendezvous, std::chrono::milliseconds straggler,
               std::unique_ptr<detail::NcclGroup, detail::NcclGroupDeleter> nccl,
               std::unique_ptr<detail::GlooGroup, detail::GlooGroupDeleter> gloo)
      : rendezvous_(&rendezvous), straggler_(straggler), nccl_(std::move(nccl)), gloo_(std::move(gloo)) {}

  Rendezvous* rendezvous_;
  std::chrono::milliseconds straggler_;
  std::unique_ptr<detail::NcclGroup, detail::NcclGroupDeleter> nccl_;  // null without GPU slots
  std::unique_ptr<detail::GlooGroup, detail::GlooGroupDeleter> gloo_;  // null alone, or without Gloo
};

namespace detail {
// nccl_group.cpp (NCCL builds) or nccl_group_none.cpp.
// `borrowed`: the caller's communicators per slot (Communicator::create's nccl_comms), or empty.
Result<std::unique_ptr<NcclGroup, NcclGroupDeleter>> make_nccl_group(Rendezvous& rendezvous,
                                                                     std::span<const int> gpu_slots,
                                                                     std::chrono::milliseconds timeout,
                                                                     std::span<void* const> borrowed);
Status nccl_broadcast(NcclGroup& group, std::span<const BroadcastBuffer> buffers, std::uint32_t root);
}  // namespace detail

}  // namespace qload::distributed
