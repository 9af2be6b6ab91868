// The staging pool: distinct aligned slots, leases returned on destruction, the budget
// enforced and instrumented, registration with the Reader.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>

#include "io/io_test_support.hpp"
#include "qload/scheduler/staging_pool.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

TEST_CASE("staging pool: leases are distinct aligned slots until the budget is used up", "[scheduler][staging]") {
  auto pool = StagingPool::create({.slot_bytes = 64 << 10, .total_bytes = (4 << 16) + 1000});
  REQUIRE(pool);
  REQUIRE(pool->slot_count() == 4);
  CHECK(pool->capacity_bytes() == 4 * (64 << 10));
  std::vector<StagingLease> leases;
  std::set<const std::byte*> starts;
  for (int i = 0; i < 4; ++i) {
    StagingLease lease = pool->try_lease();
    REQUIRE(lease);
    CHECK(lease.bytes().size() == 64 << 10);
    CHECK(reinterpret_cast<std::uintptr_t>(lease.bytes().data()) % 4096 == 0);
    CHECK(pool->contains(lease.bytes().data()));
    starts.insert(lease.bytes().data());
    std::memset(lease.bytes().data(), i, lease.bytes().size());  // writable, no overlap below
    leases.push_back(std::move(lease));
  }
  CHECK(starts.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(leases[i].bytes()[65535] == std::byte(i));
  CHECK(!pool->try_lease());  // exhausted: an empty lease, not a fifth slot
  CHECK(pool->leased_bytes() == pool->capacity_bytes());
  CHECK(pool->peak_leased_bytes() == pool->capacity_bytes());
}

TEST_CASE("staging pool: destroying or moving a lease returns its slot exactly once", "[scheduler][staging]") {
  auto pool = StagingPool::create({.slot_bytes = 4096, .total_bytes = 2 * 4096});
  REQUIRE(pool);
  {
    StagingLease a = pool->try_lease();
    StagingLease b = std::move(a);
    CHECK(!a);
    CHECK(pool->leased_bytes() == 4096);
    StagingLease c = pool->try_lease();
    c = std::move(b);  // c's own slot goes back, b's moves in
    CHECK(pool->leased_bytes() == 4096);
    CHECK(pool->peak_leased_bytes() == 2 * 4096);
  }
  CHECK(pool->leased_bytes() == 0);
  pool->reset_peak();
  CHECK(pool->peak_leased_bytes() == 0);
  StagingLease d = pool->try_lease();
  d.reset();
  d.reset();  // idempotent
  CHECK(pool->leased_bytes() == 0);
  CHECK(pool->peak_leased_bytes() == 4096);
}

TEST_CASE("staging pool: options are checked", "[scheduler][staging]") {
  CHECK(StagingPool::create({.slot_bytes = 0}).error().code() == Errc::kInvalidArgument);
  CHECK(StagingPool::create({.slot_bytes = 5000}).error().code() == Errc::kInvalidArgument);
  CHECK(StagingPool::create({.slot_bytes = 8192, .total_bytes = 4096}).error().code() == Errc::kInvalidArgument);
}

TEST_CASE("staging pool: registered with io_uring, reads into slots use fixed buffers", "[scheduler][staging]") {
  ScratchDir dir;
  const auto bytes = random_bytes(200000, 5);
  write_file(dir.file("f"), bytes);
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto pool = StagingPool::create({.slot_bytes = 128 << 10, .total_bytes = 512 << 10});
      REQUIRE(pool);
      auto reader = make_test_reader(c, 4);
      REQUIRE(pool->register_with(*reader));
      const io::FileId id = reader->open_file(dir.file("f")).value();
      StagingLease lease = pool->try_lease();
      const io::ReadRequest req{id, 4096, lease.bytes().first(100000), 0};
      REQUIRE(io::read_all(*reader, std::span(&req, 1)));
      CHECK(std::memcmp(lease.bytes().data(), bytes.data() + 4096, 100000) == 0);
      // Registration needs CAP_IPC_LOCK or enough RLIMIT_MEMLOCK; the test machines run as root.
      if (c.engine == io::EngineKind::kUring && io::probe_uring().cap_ipc_lock)
        CHECK(reader->stats().fixed_buffer_ops > 0);
    }
  }
}
