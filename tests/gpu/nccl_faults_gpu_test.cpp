// NCCL under injected faults, on the simulated NCCL (QLOAD_CUDA_SIM builds: a real clique
// cannot be made to fail on cue). Two ranks (threads, cuda:0 and cuda:1) broadcast GPU memory;
// one rank's communicator creation fails, or its collective fails or hangs. Every rank must
// end with an error naming itself and the operation, in bounded time (a failed or hung
// collective never returns by itself: only polling for asynchronous errors, the nccl_timeout
// and an abort end it), and give back its device memory; the next clique works.
#include <catch2/catch.hpp>

#if defined(QLOAD_CUDA_SIM)

#include <algorithm>
#include <chrono>
#include <future>

#include <fmt/format.h>

#include "qload/cudasim/control.hpp"
#include "qload/distributed/communicator.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "support/free_port.hpp"

using namespace qload;
using namespace std::chrono_literals;
namespace sim = qload::cudasim;

namespace {

constexpr std::size_t kBytes = std::size_t{3} << 20;

// Rank `rank` of two joins, makes its communicator (cuda:rank) and broadcasts from rank 0;
// true when the buffer then holds rank 0's bytes.
Result<bool> broadcast_rank(std::uint32_t rank, std::uint16_t port, std::chrono::milliseconds timeout) {
  QLOAD_ASSIGN_OR_RETURN(
      distributed::Rendezvous rv,
      distributed::Rendezvous::join(
          distributed::World{.rank = rank, .size = 2, .local_rank = rank, .local_size = 2, .master_port = port}, 60s));
  const int device = static_cast<int>(rank);
  const std::vector<int> slots = {device};
  QLOAD_ASSIGN_OR_RETURN(distributed::Communicator comm,
                         distributed::Communicator::create(rv, slots, {.nccl = timeout}));
  QLOAD_ASSIGN_OR_RETURN(cuda::DeviceBuffer buffer, cuda::DeviceBuffer::allocate(device, kBytes));
  std::vector<std::byte> mine(kBytes, static_cast<std::byte>(rank + 1));
  QLOAD_TRY(cuda::copy_to_device(buffer.data(), mine.data(), kBytes, device));
  const distributed::BroadcastBuffer b{.bytes = std::span(buffer.data(), kBytes), .on_device = true, .slot = 0};
  QLOAD_TRY(comm.broadcast(std::span(&b, 1), 0));
  QLOAD_TRY(cuda::copy_to_host(mine.data(), buffer.data(), kBytes, device));
  return std::ranges::all_of(mine, [](std::byte x) { return x == std::byte{1}; });
}

struct Outcome {
  Result<bool> rank0 = false;
  Result<bool> rank1 = false;
  std::chrono::milliseconds took{};
};

Outcome run_clique(std::chrono::milliseconds timeout) {
  const std::uint16_t port = qload::testing::free_port();
  const auto start = std::chrono::steady_clock::now();
  auto zero = std::async(std::launch::async, broadcast_rank, 0u, port, timeout);
  auto one = std::async(std::launch::async, broadcast_rank, 1u, port, timeout);
  Outcome o{.rank0 = zero.get(), .rank1 = one.get()};
  o.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  return o;
}

void require_skippable() {
  WARN("SKIPPED [gpu]: NCCL fault tests need two simulated GPUs (QLOAD_CUDASIM_DEVICES)");
}

void check_failed(const Result<bool>& r, std::uint32_t rank, const std::string& operation) {
  REQUIRE_FALSE(r);
  const std::string text = r.error().to_string();
  INFO(text);
  CHECK_THAT(text, Catch::Contains(fmt::format("rank {}: ", rank)));
  CHECK_THAT(text, Catch::Contains(operation));
  CHECK_THAT(text, Catch::Contains("aborted"));
}

struct CleanSimulator {
  CleanSimulator() { sim::reset(); }
  ~CleanSimulator() {
    sim::reset();
    for (int d = 0; d < 2; ++d) CHECK(sim::live_allocations(d) == 0);
  }
};

}  // namespace

TEST_CASE("nccl faults: a clean clique broadcasts, and so does one after each fault below", "[gpu][nccl]") {
  if (sim::device_count() < 2) return require_skippable();
  CleanSimulator clean;
  const Outcome o = run_clique(30s);
  REQUIRE(o.rank0);
  REQUIRE(o.rank1);
  CHECK(*o.rank0);
  CHECK(*o.rank1);
}

TEST_CASE("nccl faults: a collective that hangs on one rank ends both ranks with errors at the timeout",
          "[gpu][nccl]") {
  if (sim::device_count() < 2) return require_skippable();
  CleanSimulator clean;
  sim::inject(sim::Fault::kNcclHang, 1, 1);  // rank 1's first collective never completes
  const Outcome o = run_clique(1500ms);
  check_failed(o.rank1, 1, "ncclBroadcast of 3145728 bytes from rank 0");
  CHECK_THAT(o.rank1.error().to_string(), Catch::Contains("nccl_timeout"));
  // Rank 0 learns when rank 1 aborts (or times out itself): an error, not a hang.
  check_failed(o.rank0, 0, "ncclBroadcast of 3145728 bytes from rank 0");
  CHECK(o.took < 20s);
  const Outcome again = run_clique(30s);
  REQUIRE(again.rank0);
  REQUIRE(again.rank1);
}

TEST_CASE(
    "nccl faults: a collective that fails on one rank ends both ranks with errors, without waiting for the "
    "timeout",
    "[gpu][nccl]") {
  if (sim::device_count() < 2) return require_skippable();
  CleanSimulator clean;
  sim::inject(sim::Fault::kNcclError, 1, 1);
  const Outcome o = run_clique(60s);
  check_failed(o.rank1, 1, "ncclBroadcast of 3145728 bytes from rank 0");
  CHECK_THAT(o.rank1.error().to_string(), Catch::Contains("injected failure"));
  check_failed(o.rank0, 0, "ncclBroadcast of 3145728 bytes from rank 0");
  CHECK_THAT(o.rank0.error().to_string(), Catch::Contains("rank 1 has left"));
  CHECK(o.took < 30s);  // the error travelled; nobody waited for the 60 s timeout
}

TEST_CASE("nccl faults: a communicator that cannot be created on one rank ends both ranks with errors", "[gpu][nccl]") {
  if (sim::device_count() < 2) return require_skippable();
  CleanSimulator clean;
  sim::inject(sim::Fault::kNcclInit, 1, 1);
  const Outcome o = run_clique(1500ms);
  check_failed(o.rank1, 1, "creating communicators");
  // Rank 0's clique never completes: it gives up at the timeout.
  check_failed(o.rank0, 0, "creating the NCCL communicators of 2 ranks");
  CHECK_THAT(o.rank0.error().to_string(), Catch::Contains("nccl_timeout"));
  CHECK(o.took < 20s);
}

#endif  // QLOAD_CUDA_SIM
