// Both engines, buffered and O_DIRECT, return exactly the bytes a plain pread returns.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "io_test_support.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/host_buffer.hpp"

using namespace qload;
using namespace qload::testing;

namespace {}  // namespace

TEST_CASE("random reads from both engines equal a plain pread", "[io][engines]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  const std::size_t size = (6u << 20) + 4097;  // not a multiple of the block size
  write_file(path, random_bytes(size, 7));
  auto buffer = HostBuffer::allocate(std::size_t{2} << 20).value();

  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto reader = make_test_reader(c);
      const io::FileId id = reader->open_file(path).value();
      std::mt19937_64 rng(42);
      for (int i = 0; i < 300; ++i) {
        // Mix aligned and unaligned file offsets, memory addresses and lengths.
        std::uint64_t offset = rng() % size;
        if (i % 3 == 0) offset &= ~std::uint64_t{4095};
        std::size_t len = static_cast<std::size_t>(rng() % (buffer.size() - 64));
        if (i % 5 == 0) len = (len + 4095) & ~std::size_t{4095};
        len = static_cast<std::size_t>(std::min<std::uint64_t>(len, size - offset));
        const std::size_t shift = i % 4 == 0 ? 0 : (rng() % 64);
        auto dest = buffer.span().subspan(shift, len);
        const io::ReadRequest req{id, offset, dest, static_cast<std::uint64_t>(i)};
        INFO("offset " << offset << " length " << len << " memory shift " << shift);
        REQUIRE(io::read_all(*reader, std::span(&req, 1)));
        REQUIRE(std::memcmp(dest.data(), read_file_range(path, offset, len).data(), len) == 0);
      }
      const io::ReaderStats stats = reader->stats();
      if (c.direct != io::DirectMode::kOff && reader->file(id).direct_fd() >= 0) {
        CHECK(stats.direct_bytes > 0);  // aligned reads really went through O_DIRECT
      } else {
        CHECK(stats.direct_bytes == 0);
      }
    }
  }
}

TEST_CASE("many reads in flight complete with their own tags and bytes", "[io][engines]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  const std::size_t size = 3u << 20;
  const auto bytes = random_bytes(size, 3);
  write_file(path, bytes);
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto reader = make_test_reader(c, 16);
      const io::FileId id = reader->open_file(path).value();
      auto buffer = HostBuffer::allocate(size).value();
      std::vector<io::ReadRequest> reqs;
      const std::size_t piece = 12289;  // 3 * 4096 + 1: pieces straddle block boundaries
      for (std::size_t off = 0; off < size; off += piece)
        reqs.push_back({id, off, buffer.span().subspan(off, std::min(piece, size - off)), off});
      REQUIRE(reader->submit(reqs));
      std::vector<bool> seen(reqs.size(), false);
      std::array<io::ReadCompletion, 7> done;
      std::size_t count = 0;
      while (reader->pending() > 0) {
        const std::size_t n = reader->wait(done, 3).value();
        for (std::size_t i = 0; i < n; ++i) {
          REQUIRE(done[i].status);
          const std::size_t index = done[i].tag / piece;
          REQUIRE(done[i].tag % piece == 0);
          REQUIRE_FALSE(seen[index]);
          seen[index] = true;
          ++count;
        }
      }
      REQUIRE(count == reqs.size());
      REQUIRE(std::memcmp(buffer.data(), bytes.data(), size) == 0);
    }
  }
}

TEST_CASE("zero-length reads, reads ending at EOF and empty files", "[io][engines]") {
  ScratchDir dir;
  const std::string path = dir.file("odd.bin");
  const std::string empty = dir.file("empty.bin");
  const auto bytes = random_bytes(3 * 4096 + 100, 5);
  write_file(path, bytes);
  write_file(empty, {});
  auto buffer = HostBuffer::allocate(1 << 16).value();
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto reader = make_test_reader(c);
      const io::FileId id = reader->open_file(path).value();
      const io::FileId empty_id = reader->open_file(empty).value();
      REQUIRE(reader->file(empty_id).size() == 0);

      // Zero-length reads complete at once, anywhere in the file including its end.
      for (std::uint64_t off : {std::uint64_t{0}, std::uint64_t{4096}, std::uint64_t{bytes.size()}}) {
        const io::ReadRequest req{id, off, buffer.span().subspan(0, 0), 1};
        REQUIRE(io::read_all(*reader, std::span(&req, 1)));
      }
      const io::ReadRequest empty_read{empty_id, 0, buffer.span().subspan(0, 0), 2};
      REQUIRE(io::read_all(*reader, std::span(&empty_read, 1)));

      // Reads that end exactly at EOF: the whole file, an aligned start, the last byte.
      for (std::uint64_t off : {std::uint64_t{0}, std::uint64_t{8192}, std::uint64_t{bytes.size() - 1}}) {
        const std::size_t len = bytes.size() - off;
        const io::ReadRequest req{id, off, buffer.span().subspan(0, len), 3};
        REQUIRE(io::read_all(*reader, std::span(&req, 1)));
        REQUIRE(std::memcmp(buffer.data(), bytes.data() + off, len) == 0);
      }
    }
  }
}

TEST_CASE("a read past the end of a file is refused with file and offset", "[io][engines]") {
  ScratchDir dir;
  const std::string path = dir.file("small.bin");
  write_file(path, random_bytes(1000, 1));
  const std::string empty = dir.file("empty.bin");
  write_file(empty, {});
  auto buffer = HostBuffer::allocate(4096).value();
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto reader = make_test_reader(c);
      const io::FileId id = reader->open_file(path).value();
      const io::FileId empty_id = reader->open_file(empty).value();
      const io::ReadRequest past{id, 900, buffer.span().subspan(0, 101), 1};
      const io::ReadRequest in_empty{empty_id, 0, buffer.span().subspan(0, 1), 2};
      const io::ReadRequest overflow{id, ~std::uint64_t{0} - 10, buffer.span().subspan(0, 100), 3};
      for (const auto& [req, file] : {std::pair{past, path}, std::pair{in_empty, empty}, std::pair{overflow, path}}) {
        auto status = io::read_all(*reader, std::span(&req, 1));
        REQUIRE_FALSE(status);
        CHECK(status.error().code() == Errc::kTruncated);
        CHECK(status.error().file() == file);
        CHECK(status.error().offset() == req.offset);
      }
      // An invalid request in a batch queues nothing: the valid one is not read either.
      const io::ReadRequest good{id, 0, buffer.span().subspan(0, 10), 4};
      const std::array batch{good, past};
      REQUIRE_FALSE(reader->submit(batch));
      REQUIRE(reader->pending() == 0);
      const io::ReadRequest unknown{7, 0, buffer.span().subspan(0, 10), 5};
      auto status = reader->submit(std::span(&unknown, 1));
      REQUIRE_FALSE(status);
      CHECK(status.error().code() == Errc::kInvalidArgument);
    }
  }
}

TEST_CASE("a sparse file larger than 4 GiB reads right across the 4 GiB mark", "[io][engines][large]") {
  ScratchDir dir;
  const std::string path = dir.file("sparse.bin");
  const std::uint64_t size = (5ull << 30) + 4097;
  const std::uint64_t four_gib = 4ull << 30;
  // Markers around the 4 GiB mark and at the end; everything else is a hole (reads as zero).
  const std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> markers{
      {four_gib - 5000, random_bytes(10000, 11)},
      {size - 300, random_bytes(300, 12)},
      {4096 * 3, random_bytes(77, 13)}};
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
    for (const auto& [off, data] : markers)
      REQUIRE(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off)) == static_cast<ssize_t>(data.size()));
    ::close(fd);
  }
  auto buffer = HostBuffer::allocate(1 << 20).value();
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto reader = make_test_reader(c);
      const io::FileId id = reader->open_file(path).value();
      REQUIRE(reader->file(id).size() == size);
      for (std::uint64_t off : {four_gib - 6000, four_gib - 4096, four_gib + 1, size - (1 << 20), size - 1000}) {
        const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - off));
        const io::ReadRequest req{id, off, buffer.span().subspan(0, len), 0};
        INFO("offset " << off);
        REQUIRE(io::read_all(*reader, std::span(&req, 1)));
        REQUIRE(std::memcmp(buffer.data(), read_file_range(path, off, len).data(), len) == 0);
      }
    }
  }
}

TEST_CASE("a read larger than 0x7ffff000 bytes is split and lands intact", "[io][engines][large]") {
  ScratchDir dir;
  const std::string path = dir.file("big-sparse.bin");
  const std::uint64_t size = (4ull << 30) + 123;
  const std::uint64_t start = (2ull << 30) - 4096 * 3;  // a read that crosses 2 GiB and 4 GiB - ...
  const std::uint64_t len = size - start;               // ~2 GiB + 12 KiB: more than one kernel op
  REQUIRE(len > io::kMaxReadBytes);
  const auto head = random_bytes(4096, 21), middle = random_bytes(4096, 22), tail = random_bytes(123, 23);
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
    REQUIRE(::pwrite(fd, head.data(), 4096, static_cast<off_t>(start)) == 4096);
    REQUIRE(::pwrite(fd, middle.data(), 4096, static_cast<off_t>(start + io::kMaxReadBytes - 2048)) == 4096);
    REQUIRE(::pwrite(fd, tail.data(), 123, static_cast<off_t>(size - 123)) == 123);
    ::close(fd);
  }
  auto buffer = HostBuffer::allocate(len).value();
  // One engine each, direct where it can be: the clamp lives in the shared segment logic.
  for (auto engine : {io::EngineKind::kUring, io::EngineKind::kPread}) {
    if (engine == io::EngineKind::kUring && !io::probe_uring().usable) continue;
    auto reader = make_test_reader({engine, direct_mode_for_tests()}, 4);
    const io::FileId id = reader->open_file(path).value();
    std::memset(buffer.data(), 0xAB, 1 << 20);  // prove the bytes are rewritten
    const io::ReadRequest req{id, start, buffer.span(), 0};
    REQUIRE(io::read_all(*reader, std::span(&req, 1)));
    CHECK(reader->stats().ops >= 2);
    CHECK(std::memcmp(buffer.data(), head.data(), 4096) == 0);
    CHECK(std::memcmp(buffer.data() + io::kMaxReadBytes - 2048, middle.data(), 4096) == 0);
    CHECK(std::memcmp(buffer.data() + len - 123, tail.data(), 123) == 0);
    CHECK(buffer.data()[4096 + 17] == std::byte{0});  // a hole reads as zero
  }
}

TEST_CASE("the queue depth bounds the reads in flight, and is reached", "[io][engines]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  const std::size_t size = 4u << 20;
  const auto bytes = random_bytes(size, 31);
  write_file(path, bytes);
  auto buffer = HostBuffer::allocate(size).value();
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto reader = make_test_reader(c, 3);
      const io::FileId id = reader->open_file(path).value();
      std::vector<io::ReadRequest> reqs;
      for (std::size_t off = 0; off < size; off += 64 << 10)
        reqs.push_back({id, off, buffer.span().subspan(off, 64 << 10), off});
      REQUIRE(io::read_all(*reader, reqs));
      REQUIRE(std::memcmp(buffer.data(), bytes.data(), size) == 0);
      const io::ReaderStats stats = reader->stats();
      CHECK(stats.max_in_flight <= 3);
      if (c.engine == io::EngineKind::kUring) CHECK(stats.max_in_flight == 3);  // one batch fills the ring at once
    }
  }
}

TEST_CASE("reads into registered buffers use io_uring fixed buffers", "[io][engines]") {
  const io::UringProbe probe = io::probe_uring();
  if (!probe.usable) {
    WARN("io_uring unavailable: " << probe.reason);
    return;
  }
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  const std::size_t size = 2u << 20;
  const auto bytes = random_bytes(size, 41);
  write_file(path, bytes);
  auto staging = HostBuffer::allocate(size).value();
  auto other = HostBuffer::allocate(size).value();
  for (auto direct : {direct_mode_for_tests(), io::DirectMode::kOff}) {
    auto reader = make_test_reader({io::EngineKind::kUring, direct}, 4);
    const std::array regions{staging.span()};
    REQUIRE(reader->register_buffers(regions));
    const io::FileId id = reader->open_file(path).value();
    const std::array reqs{io::ReadRequest{id, 0, staging.span().subspan(0, size / 2), 0},
                          io::ReadRequest{id, size / 2, staging.span().subspan(size / 2), 1},
                          io::ReadRequest{id, 0, other.span(), 2}};
    REQUIRE(io::read_all(*reader, reqs));
    CHECK(std::memcmp(staging.data(), bytes.data(), size) == 0);
    CHECK(std::memcmp(other.data(), bytes.data(), size) == 0);
    const io::ReaderStats stats = reader->stats();
    // Root has CAP_IPC_LOCK; elsewhere 2 MiB must fit the memlock limit for this to hold.
    if (probe.cap_ipc_lock || probe.memlock_limit >= (8u << 20)) {
      CHECK(stats.fixed_buffer_ops >= 2);         // the staging reads
      CHECK(stats.fixed_buffer_ops < stats.ops);  // not the read into `other`
    }
    CHECK_FALSE(reader->register_buffers(regions));  // once only
  }
}

TEST_CASE("io_uring enters a whole batch of reads with one submit call", "[io][engines]") {
  if (!io::probe_uring().usable) {
    WARN("io_uring unavailable: " << io::probe_uring().reason);
    return;
  }
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  write_file(path, random_bytes(1 << 20, 51));
  auto buffer = HostBuffer::allocate(1 << 20).value();
  auto reader = make_test_reader({io::EngineKind::kUring, io::DirectMode::kOff}, 16);
  const io::FileId id = reader->open_file(path).value();
  std::vector<io::ReadRequest> reqs;
  for (std::size_t off = 0; off < (1u << 20); off += 64 << 10)
    reqs.push_back({id, off, buffer.span().subspan(off, 64 << 10), off});
  REQUIRE(reqs.size() == 16);
  REQUIRE(reader->submit(reqs));
  CHECK(reader->stats().ops == 16);
  CHECK(reader->stats().submit_calls == 1);
  std::array<io::ReadCompletion, 16> done;
  std::size_t n = 0;
  while (n < 16) n += reader->wait(std::span(done).subspan(n), 16 - n).value();
  for (const auto& d : done) CHECK(d.status);
}
