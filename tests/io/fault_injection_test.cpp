// Injected faults: retried where retrying is right, otherwise a typed error naming the file
// and offset; every descriptor released either way.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>

#include "io_test_support.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/fault_injector.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/host_buffer.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

constexpr std::size_t kFileBytes = (1u << 20) + 333;
constexpr std::size_t kChunk = 256u << 10;

struct Fixture {
  ScratchDir dir;
  std::string path = dir.file("data.bin");
  std::vector<std::byte> bytes = random_bytes(kFileBytes, 99);
  HostBuffer buffer = HostBuffer::allocate(kFileBytes).value();
  Fixture() { write_file(path, bytes); }

  // Reads the whole file as aligned chunks (so O_DIRECT is used where possible).
  std::vector<io::ReadRequest> chunks(io::FileId id) {
    std::vector<io::ReadRequest> reqs;
    for (std::size_t off = 0; off < kFileBytes; off += kChunk)
      reqs.push_back({id, off, buffer.span().subspan(off, std::min(kChunk, kFileBytes - off)), off});
    return reqs;
  }
  bool intact() const { return std::memcmp(buffer.data(), bytes.data(), kFileBytes) == 0; }
};

// Runs a whole-file read with `rule` injected; returns the status and the reader's stats.
std::pair<Status, io::ReaderStats> read_with_fault(Fixture& f, const EngineCase& c, io::FaultRule rule) {
  io::FaultInjector faults;
  faults.add(rule);
  auto reader = make_test_reader(c, 4, &faults);
  const io::FileId id = reader->open_file(f.path).value();
  std::memset(f.buffer.data(), 0, kFileBytes);
  auto reqs = f.chunks(id);
  Status status = io::read_all(*reader, reqs);
  CHECK(faults.fired() >= 1);  // the fault really happened
  return {std::move(status), reader->stats()};
}

}  // namespace

TEST_CASE("short reads are continued until every byte is in place", "[io][faults]") {
  Fixture f;
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      // Persistent: every op covering this offset returns half of what it read.
      auto [status, stats] =
          read_with_fault(f, c, {.kind = io::FaultKind::kShortRead, .offset = 300000, .times = io::FaultRule::kAlways});
      REQUIRE(status);
      CHECK(stats.short_reads >= 1);
      CHECK(f.intact());
    }
  }
}

TEST_CASE("a short O_DIRECT read is resubmitted at an aligned offset", "[io][faults]") {
  Fixture f;
  for (const EngineCase& c : engine_cases()) {
    if (c.direct == io::DirectMode::kOff) continue;
    // 5000 bytes: the aligned 4096 are kept and the op resumes direct at offset 4096.
    // 100 bytes: not one block arrived, so the rest of that chunk is read buffered.
    for (std::uint32_t short_bytes : {5000u, 100u}) {
      DYNAMIC_SECTION(c.label() << " short read of " << short_bytes) {
        io::FaultInjector faults;
        faults.add({.kind = io::FaultKind::kShortRead, .offset = 0, .short_bytes = short_bytes});
        auto reader = make_test_reader(c, 4, &faults);
        const io::FileId id = reader->open_file(f.path).value();
        if (reader->file(id).direct_fd() < 0 || reader->file(id).direct_alignment() != 4096) {
          WARN("O_DIRECT with 4096-byte alignment unavailable for " << f.path << "; resubmission not exercised");
          continue;
        }
        auto reqs = f.chunks(id);
        REQUIRE(io::read_all(*reader, reqs));
        CHECK(f.intact());
        const io::ReaderStats stats = reader->stats();
        CHECK(stats.short_reads == 1);
        // Everything but the 333-byte tail goes direct, less what the fallback read buffered.
        const std::uint64_t buffered_fallback = short_bytes < 4096 ? kChunk : 0;
        CHECK(stats.direct_bytes == kFileBytes - 333 - buffered_fallback);
      }
    }
  }
}

TEST_CASE("EINTR and EAGAIN are retried", "[io][faults]") {
  Fixture f;
  for (const EngineCase& c : engine_cases()) {
    for (auto kind : {io::FaultKind::kEintr, io::FaultKind::kEagain}) {
      DYNAMIC_SECTION(c.label() << (kind == io::FaultKind::kEintr ? " EINTR" : " EAGAIN")) {
        auto [status, stats] = read_with_fault(f, c, {.kind = kind, .offset = 700000, .times = 5});
        REQUIRE(status);
        CHECK(stats.retries == 5);
        CHECK(f.intact());
      }
    }
  }
}

TEST_CASE("a transient EIO is retried, a persistent one names file and offset", "[io][faults]") {
  Fixture f;
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto [ok, ok_stats] = read_with_fault(f, c, {.kind = io::FaultKind::kEio, .offset = 600000, .times = 2});
      REQUIRE(ok);  // two failures fit in the default eio_retries = 2
      CHECK(f.intact());

      auto [bad, bad_stats] =
          read_with_fault(f, c, {.kind = io::FaultKind::kEio, .offset = 600000, .times = io::FaultRule::kAlways});
      REQUIRE_FALSE(bad);
      CHECK(bad.error().code() == Errc::kIo);
      CHECK(bad.error().sys_errno() == EIO);
      CHECK(bad.error().file() == f.path);
      // The failing op is the one covering 600000: its start is within one chunk before it.
      REQUIRE(bad.error().offset().has_value());
      CHECK(*bad.error().offset() <= 600000);
      CHECK(*bad.error().offset() > 600000 - kChunk);
      CHECK_THAT(bad.error().to_string(), Catch::Contains("Input/output error") && Catch::Contains(f.path));
    }
  }
}

TEST_CASE("ENOMEM from the kernel is an out-of-memory error naming file and offset", "[io][faults]") {
  Fixture f;
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto [status, stats] = read_with_fault(f, c, {.kind = io::FaultKind::kEnomem, .offset = kChunk * 2 + 5});
      REQUIRE_FALSE(status);
      CHECK(status.error().code() == Errc::kOutOfMemory);
      CHECK(status.error().file() == f.path);
      CHECK(status.error().offset() == kChunk * 2);
    }
  }
}

TEST_CASE("a flipped byte passes the reader and is caught by its checksum", "[io][faults]") {
  Fixture f;
  const std::uint64_t flip_at = 123457;
  const std::uint64_t chunk_start = flip_at / kChunk * kChunk;
  const auto expected = io::xxh3_64(std::span(f.bytes).subspan(chunk_start, kChunk));
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto [status, stats] = read_with_fault(f, c, {.kind = io::FaultKind::kFlipByte, .offset = flip_at});
      REQUIRE(status);  // the reader cannot know: the bytes look like any others
      REQUIRE_FALSE(f.intact());
      CHECK(f.buffer.data()[flip_at] == ~f.bytes[flip_at]);
      auto verified = io::verify_xxh3_64(f.buffer.span().subspan(chunk_start, kChunk), expected, f.path, chunk_start);
      REQUIRE_FALSE(verified);
      CHECK(verified.error().code() == Errc::kChecksumMismatch);
      CHECK(verified.error().file() == f.path);
      CHECK(verified.error().offset() == chunk_start);
    }
  }
}

TEST_CASE("failing each op in turn: every run ends in a typed error or intact bytes, nothing leaks",
          "[io][faults][sweep]") {
  Fixture f;
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      // Count the ops of a clean run first.
      std::uint64_t ops = 0;
      {
        io::FaultInjector counter;
        auto reader = make_test_reader(c, 4, &counter);
        const io::FileId id = reader->open_file(f.path).value();
        auto reqs = f.chunks(id);
        REQUIRE(io::read_all(*reader, reqs));
        ops = counter.ops_seen();
      }
      REQUIRE(ops >= 5);
      const int fds_before = open_fd_count();
      for (auto kind :
           {io::FaultKind::kEintr, io::FaultKind::kShortRead, io::FaultKind::kEio, io::FaultKind::kEnomem}) {
        for (std::uint64_t n = 0; n < ops; ++n) {
          INFO("fault kind " << static_cast<int>(kind) << " at op " << n);
          io::FaultInjector faults;
          faults.add({.kind = kind, .nth_op = n});
          {
            auto reader = make_test_reader(c, 4, &faults);
            const io::FileId id = reader->open_file(f.path).value();
            std::memset(f.buffer.data(), 0, kFileBytes);
            auto reqs = f.chunks(id);
            Status status = io::read_all(*reader, reqs);
            REQUIRE(faults.fired() == 1);
            if (kind == io::FaultKind::kEnomem) {
              REQUIRE_FALSE(status);
              CHECK(status.error().code() == Errc::kOutOfMemory);
              CHECK(status.error().file() == f.path);
              CHECK(status.error().offset().has_value());
            } else {
              REQUIRE(status);  // retried or continued
              CHECK(f.intact());
            }
          }
          REQUIRE(open_fd_count() == fds_before);  // ring and file descriptors all closed
        }
      }
    }
  }
}

TEST_CASE("destroying a reader with reads in flight leaves no late writes and closes everything", "[io][faults]") {
  Fixture f;
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      const int fds_before = open_fd_count();
      {
        auto reader = make_test_reader(c, 4);
        const io::FileId id = reader->open_file(f.path).value();
        auto reqs = f.chunks(id);
        REQUIRE(reader->submit(reqs));
        // No wait(): reads not yet started may be dropped, but the destructor must wait for
        // the ones the kernel is writing into `buffer`.
      }
      CHECK(open_fd_count() == fds_before);
      std::memset(f.buffer.data(), 0x5A, kFileBytes);
      ::usleep(20000);  // a late kernel write would land here
      const std::vector<std::byte> pattern(kFileBytes, std::byte{0x5A});
      CHECK(std::memcmp(f.buffer.data(), pattern.data(), kFileBytes) == 0);
    }
  }
}
