// DirectMode::kAuto reads a file the page cache already holds buffered, and one it does not
// hold with O_DIRECT (io/page_cache.hpp, InputFile::open).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "io_test_support.hpp"
#include "qload/io/input_file.hpp"
#include "qload/io/page_cache.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "support/scratch.hpp"

namespace qload::testing {
namespace {

constexpr std::size_t kFileBytes = 8u << 20;

double resident(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  auto fraction = io::page_cache_resident_fraction(fd, kFileBytes);
  ::close(fd);
  REQUIRE(fraction);
  return *fraction;
}

// Writes the file back and asks the kernel to drop its clean pages; true when it did.
bool evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return resident(path) < 0.1;
}

// Reads the whole file with kAuto through `engine`; returns the reader's direct bytes.
std::uint64_t read_auto(io::EngineKind engine, const std::string& path, const std::vector<std::byte>& want,
                        int* direct_fd, double* resident_at_open) {
  auto reader = make_test_reader({engine, io::DirectMode::kAuto}, 4);
  const io::FileId id = reader->open_file(path).value();
  *direct_fd = reader->file(id).direct_fd();
  *resident_at_open = reader->file(id).resident_at_open();
  auto buffer = HostBuffer::allocate(kFileBytes, 4096).value();
  const io::ReadRequest req{id, 0, buffer.span(), 0};
  REQUIRE(io::read_all(*reader, std::span(&req, 1)));
  CHECK(std::memcmp(buffer.data(), want.data(), kFileBytes) == 0);
  return reader->stats().direct_bytes;
}

}  // namespace

TEST_CASE("page cache residency is measured without reading the file", "[io][page_cache]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  write_file(path, random_bytes(kFileBytes, 5));
  CHECK(resident(path) == 1.0);  // just written
  if (!evict(path)) {
    WARN("this file system keeps the pages after POSIX_FADV_DONTNEED; eviction not exercised");
    return;
  }
  CHECK(resident(path) < 0.1);  // and asking twice did not bring it in
  const std::string empty = dir.file("empty.bin");
  write_file(empty, {});
  const int fd = ::open(empty.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(io::page_cache_resident_fraction(fd, 0).value() == 1.0);
  ::close(fd);
}

TEST_CASE("direct auto: a warm file is read buffered, a cold one with O_DIRECT", "[io][page_cache]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  const auto bytes = random_bytes(kFileBytes, 6);
  write_file(path, bytes);
  for (const EngineCase& c : engine_cases()) {
    if (c.direct == io::DirectMode::kOff) continue;
    DYNAMIC_SECTION(c.label()) {
      int direct_fd = -2;
      double at_open = -1;
      // Warm: the page cache has every page, so no O_DIRECT descriptor is even opened.
      REQUIRE(resident(path) >= io::kCachedEnoughForBuffered);
      CHECK(read_auto(c.engine, path, bytes, &direct_fd, &at_open) == 0);
      CHECK(direct_fd == -1);
      CHECK(at_open >= io::kCachedEnoughForBuffered);
      if (direct_mode_for_tests() != io::DirectMode::kOn) {
        WARN("the temp directory refuses O_DIRECT; the cold half is not exercised");
        continue;
      }
      if (!evict(path)) {
        WARN("this file system keeps the pages after POSIX_FADV_DONTNEED; the cold half is not exercised");
        continue;
      }
      // Cold: O_DIRECT, and the aligned whole-file read goes through it.
      CHECK(read_auto(c.engine, path, bytes, &direct_fd, &at_open) == kFileBytes);
      CHECK(direct_fd >= 0);
      CHECK(at_open < io::kCachedEnoughForBuffered);
    }
  }
}

}  // namespace qload::testing
