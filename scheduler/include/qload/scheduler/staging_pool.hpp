// The staging pool: a fixed budget of equal, aligned host-memory slots that reads land in
// before their bytes are verified and placed.
//
// The whole pool is one HostBuffer, allocated once (transparent huge pages: first touch of
// 4 KiB pages runs at ~0.27 GB/s on these machines, huge pages ~2 GB/s) and registered once
// with a Reader (io_uring fixed buffers), so no read ever pins or allocates memory. A slot is
// leased as a move-only StagingLease and goes back to the pool when the lease is destroyed.
// A load to a GPU pins the same block once with cudaHostRegister (pin()), so copy engines DMA
// straight from the slots; the pin lasts as long as the pool, so a borrowed pool pins once.
//
// Instrumented: bytes leased now and the peak since creation (or reset_peak), so tests and
// load reports can prove the budget was never exceeded.
//
// Thread-safety: try_lease, lease destruction and the counters may be used from any thread.
// The pool must outlive its leases (asserted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "qload/io/reader.hpp"
#include "qload/runtime/error.hpp"

namespace qload::scheduler {

// Defaults, and why:
//  - 16 MiB slots: one slot is one coalesced read. 8-16 MiB reads already reach the disk's
//    sequential bandwidth here (8 MiB preads: 13-18 GB/s warm, ~4 GB/s cold), and a slot that
//    size keeps per-task overhead (a trace event, a queue hop, a hash finalisation) below 0.1%.
//  - 256 MiB in all (16 slots): enough for the reads in flight (8 by default) plus as many
//    chunks waiting for or undergoing verify/place on the CPU workers, so the disk never waits
//    for a free slot; small next to the 24 GiB hosts, and the figure a GPU load holds in pinned
//    memory whatever the checkpoint size (the design's host-memory contract).
struct StagingOptions {
  std::uint64_t slot_bytes = std::uint64_t{16} << 20;    // size of one slot (multiple of 4096)
  std::uint64_t total_bytes = std::uint64_t{256} << 20;  // budget: slots = total / slot

  // kInvalidArgument unless slot_bytes is a non-zero multiple of 4096 and total_bytes holds at
  // least one slot.
  Status validate() const;
  std::size_t slot_count() const noexcept { return slot_bytes == 0 ? 0 : total_bytes / slot_bytes; }
};

namespace detail {
struct PoolState;
}

// One leased slot. Move-only; destroying (or reset()) returns the slot to its pool.
class StagingLease {
 public:
  StagingLease() = default;
  StagingLease(StagingLease&& other) noexcept
      : state_(std::exchange(other.state_, nullptr)), slot_(std::exchange(other.slot_, 0)) {}
  StagingLease& operator=(StagingLease&& other) noexcept;
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;
  ~StagingLease() { reset(); }

  // The slot's memory (slot_bytes long, 4096-aligned); empty for an empty lease.
  std::span<std::byte> bytes() const noexcept;
  std::uint32_t slot() const noexcept { return slot_; }
  explicit operator bool() const noexcept { return state_ != nullptr; }
  void reset() noexcept;

 private:
  friend class StagingPool;
  StagingLease(detail::PoolState* state, std::uint32_t slot) : state_(state), slot_(slot) {}
  detail::PoolState* state_ = nullptr;
  std::uint32_t slot_ = 0;
};

class StagingPool {
 public:
  // Allocates options.slot_count() slots as one block. kInvalidArgument for bad options,
  // kOutOfMemory if the block cannot be mapped.
  static Result<StagingPool> create(const StagingOptions& options);

  StagingPool(StagingPool&&) noexcept;
  StagingPool& operator=(StagingPool&&) noexcept;
  ~StagingPool();

  // A free slot, or an empty lease if every slot is leased (the caller's budget should make
  // that impossible; the executor treats it as an internal error).
  StagingLease try_lease();

  // Declares the pool's memory to `reader` as buffers reads will land in repeatedly (io_uring
  // fixed buffers), in regions of whole slots of at most 1 GiB (the kernel's per-buffer limit).
  Status register_with(io::Reader& reader) const;

  std::uint64_t slot_bytes() const noexcept;
  std::size_t slot_count() const noexcept;
  std::uint64_t capacity_bytes() const noexcept { return slot_bytes() * slot_count(); }
  std::uint64_t leased_bytes() const noexcept;       // slots out now x slot_bytes
  std::uint64_t peak_leased_bytes() const noexcept;  // most ever leased at once
  void reset_peak() noexcept;                        // peak := leased now
  // Page-locks the pool's memory for CUDA copies (cudaHostRegister, once; later calls do
  // nothing). kUnsupported without CUDA or a GPU. Must not be called while leases are out.
  Status pin();
  bool pinned() const noexcept;
  // True when `p` points into the pool's memory (for tests and assertions).
  bool contains(const std::byte* p) const noexcept;

 private:
  explicit StagingPool(std::unique_ptr<detail::PoolState> state);
  std::unique_ptr<detail::PoolState> state_;
};

}  // namespace qload::scheduler
