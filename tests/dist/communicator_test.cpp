// The host side of the Communicator: scatter sends each rank its own part of the root's bytes,
// in as many rendezvous pieces as the longest part takes (ranks are threads with their own
// sockets). The GPU side (NCCL) is tests/gpu/communicator_gpu_test.cpp.
#include <catch2/catch.hpp>

#include <future>

#include "qload/dist/communicator.hpp"
#include "support/free_port.hpp"

using namespace qload;
using namespace qload::testing;
using namespace std::chrono_literals;

namespace {

// Byte i of rank q's part: a function of both, so a part sent to the wrong rank or shifted by a
// piece shows.
std::vector<std::byte> part_for(std::uint32_t q, std::uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  for (std::uint64_t i = 0; i < bytes; ++i) out[i] = static_cast<std::byte>((i * 131 + q * 17 + i / 4093) & 0xff);
  return out;
}

}  // namespace

TEST_CASE("communicator: scatter gives each rank its own part of the root's bytes, in pieces",
          "[runtime][rendezvous]") {
  // Rank 2's part spans two 32 MiB pieces; rank 0's is empty.
  const std::vector<std::uint64_t> sizes = {0, 1000, (std::uint64_t{40} << 20) + 7, 12345};
  const std::uint32_t size = 4, root = 1;
  const std::uint16_t port = free_port();
  std::vector<std::future<Result<std::vector<std::byte>>>> ranks;
  for (std::uint32_t r = 0; r < size; ++r)
    ranks.push_back(std::async(std::launch::async, [=]() -> Result<std::vector<std::byte>> {
      QLOAD_ASSIGN_OR_RETURN(Rendezvous rv, Rendezvous::join(World{.rank = r,
                                                                   .size = size,
                                                                   .local_rank = r,
                                                                   .local_size = size,
                                                                   .master_addr = "127.0.0.1",
                                                                   .master_port = port},
                                                             10s));
      QLOAD_ASSIGN_OR_RETURN(Communicator comm, Communicator::create(rv, {}));
      std::vector<std::vector<std::byte>> parts;
      std::vector<std::span<const std::byte>> views;
      if (r == root)
        for (std::uint32_t q = 0; q < size; ++q) views.push_back(parts.emplace_back(part_for(q, sizes[q])));
      std::vector<std::byte> mine(r == root ? 0 : sizes[r]);
      // Twice: the rounds of one scatter do not leak into the next.
      for (int round = 0; round < 2; ++round) QLOAD_TRY(comm.scatter(sizes, views, mine, root));
      return mine;
    }));
  for (std::uint32_t r = 0; r < size; ++r) {
    INFO("rank " << r);
    auto got = ranks[r].get();
    if (!got) FAIL(got.error().to_string());
    if (r != root) CHECK(*got == part_for(r, sizes[r]));
  }
}

TEST_CASE("communicator: a scatter whose sizes disagree with the receiver's buffer is refused",
          "[runtime][rendezvous]") {
  auto rv = Rendezvous::join(World{.rank = 0, .size = 1, .master_addr = "127.0.0.1", .master_port = 1}, 1s);
  REQUIRE(rv);
  auto comm = Communicator::create(*rv, {});
  REQUIRE(comm);
  const std::vector<std::uint64_t> sizes = {0};
  std::vector<std::byte> none;
  CHECK(comm->scatter(sizes, {}, none, 0).has_value() == false);  // the root must pass one part per rank
  const std::span<const std::byte> empty;
  CHECK(comm->scatter(sizes, std::span(&empty, 1), none, 0));
  CHECK_FALSE(comm->scatter(sizes, std::span(&empty, 1), none, 1));  // no rank 1
}
