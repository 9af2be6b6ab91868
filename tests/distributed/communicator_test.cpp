// The host side of the Communicator, through Gloo: scatter sends each rank its own part of the
// root's bytes, broadcast the same bytes to all, and a rank that dies or never sends ends the
// others' waits with errors naming it (ranks are threads with their own sockets). The GPU side
// (NCCL) is tests/gpu/communicator_gpu_test.cpp.
#include <catch2/catch.hpp>

#include <future>
#include <utility>

#include "qload/distributed/communicator.hpp"
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

distributed::World world_of(std::uint32_t r, std::uint32_t size, std::uint16_t port) {
  return distributed::World{
      .rank = r, .size = size, .local_rank = r, .local_size = size, .master_addr = "127.0.0.1", .master_port = port};
}

// `body(rank, communicator)` on every rank of a world of `size` (threads), each rank's result.
template <typename F>
auto on_every_rank(std::uint32_t size, F body) {
  using R = decltype(body(0u, std::declval<distributed::Communicator&>()));
  const std::uint16_t port = free_port();
  std::vector<std::future<R>> ranks;
  for (std::uint32_t r = 0; r < size; ++r)
    ranks.push_back(std::async(std::launch::async, [=]() -> R {
      QLOAD_ASSIGN_OR_RETURN(distributed::Rendezvous rv, distributed::Rendezvous::join(world_of(r, size, port), 10s));
      QLOAD_ASSIGN_OR_RETURN(distributed::Communicator comm, distributed::Communicator::create(rv, {}));
      return body(r, comm);
    }));
  std::vector<R> out;
  for (auto& f : ranks) out.push_back(f.get());
  return out;
}

TEST_CASE("communicator: scatter gives each rank its own part of the root's bytes", "[dist][gloo]") {
  // Rank 2's part is 40 MiB; rank 0's is empty.
  const std::vector<std::uint64_t> sizes = {0, 1000, (std::uint64_t{40} << 20) + 7, 12345};
  const std::uint32_t size = 4, root = 1;
  auto got =
      on_every_rank(size, [&](std::uint32_t r, distributed::Communicator& comm) -> Result<std::vector<std::byte>> {
        std::vector<std::vector<std::byte>> parts;
        std::vector<std::span<const std::byte>> views;
        if (r == root)
          for (std::uint32_t q = 0; q < size; ++q) views.push_back(parts.emplace_back(part_for(q, sizes[q])));
        std::vector<std::byte> mine(r == root ? 0 : sizes[r]);
        // Twice: the rounds of one scatter do not leak into the next.
        for (int round = 0; round < 2; ++round) QLOAD_TRY(comm.scatter(sizes, views, mine, root));
        return mine;
      });
  for (std::uint32_t r = 0; r < size; ++r) {
    INFO("rank " << r);
    if (!got[r]) FAIL(got[r].error().to_string());
    if (r != root) CHECK(*got[r] == part_for(r, sizes[r]));
  }
}

TEST_CASE("communicator: broadcast gives every rank the root's host bytes", "[dist][gloo]") {
  const std::uint32_t size = 3, root = 2;
  auto got =
      on_every_rank(size, [&](std::uint32_t r, distributed::Communicator& comm) -> Result<std::vector<std::byte>> {
        std::vector<std::byte> bytes = r == root ? part_for(9, 3'000'001) : std::vector<std::byte>(3'000'001);
        std::vector<std::byte> empty;
        const distributed::BroadcastBuffer buffers[] = {{.bytes = bytes}, {.bytes = empty}};
        QLOAD_TRY(comm.broadcast(buffers, root));
        return bytes;
      });
  for (std::uint32_t r = 0; r < size; ++r) {
    if (!got[r]) FAIL(got[r].error().to_string());
    CHECK(*got[r] == part_for(9, 3'000'001));
  }
}

TEST_CASE("communicator: a root that dies or never sends ends the receiver's wait, naming it", "[dist][gloo]") {
  for (const bool dies : {true, false}) {
    INFO((dies ? "the root exits" : "the root never sends"));
    const std::uint16_t port = free_port();
    std::promise<void> received_or_failed;
    auto root = std::async(std::launch::async, [&]() -> Status {
      QLOAD_ASSIGN_OR_RETURN(distributed::Rendezvous rv, distributed::Rendezvous::join(world_of(0, 2, port), 1500ms));
      QLOAD_ASSIGN_OR_RETURN(distributed::Communicator comm, distributed::Communicator::create(rv, {}));
      // Both ends have their mesh before the root goes (dying while the other still connects is
      // a failure of the creation instead, also an error, but not the one tested here).
      QLOAD_TRY(comm.all_ok(true));
      if (!dies) received_or_failed.get_future().wait();  // alive, silent
      return {};                                          // dies: its communicator and sockets go
    });
    Result<distributed::Rendezvous> rv = distributed::Rendezvous::join(world_of(1, 2, port), 1500ms);
    REQUIRE(rv);
    Result<distributed::Communicator> comm = distributed::Communicator::create(*rv, {});
    REQUIRE(comm);
    REQUIRE(comm->all_ok(true));
    std::vector<std::byte> mine(1 << 20);
    const std::vector<std::uint64_t> sizes = {0, mine.size()};
    const Status got = comm->scatter(sizes, {}, mine, 0);
    received_or_failed.set_value();
    REQUIRE_FALSE(got);
    CHECK(got.error().code() == Errc::kIo);
    CHECK_THAT(got.error().message(), Catch::Contains("rank 1: receiving from rank 0 through Gloo"));
    CHECK(root.get());
  }
}

TEST_CASE("communicator: a scatter whose sizes disagree with the receiver's buffer is refused", "[dist]") {
  auto rv = distributed::Rendezvous::join(
      distributed::World{.rank = 0, .size = 1, .master_addr = "127.0.0.1", .master_port = 1}, 1s);
  REQUIRE(rv);
  auto comm = distributed::Communicator::create(*rv, {});
  REQUIRE(comm);
  const std::vector<std::uint64_t> sizes = {0};
  std::vector<std::byte> none;
  CHECK(comm->scatter(sizes, {}, none, 0).has_value() == false);  // the root must pass one part per rank
  const std::span<const std::byte> empty;
  CHECK(comm->scatter(sizes, std::span(&empty, 1), none, 0));
  CHECK_FALSE(comm->scatter(sizes, std::span(&empty, 1), none, 1));  // no rank 1
}
