// The pread engine's page filling (io/src/page_fill.hpp): buffered reads into memory never
// touched land in it page by page from a mapping of the file, byte for byte what pread gives;
// pages already present, memory that is not private anonymous, and a file cut short are read
// (or refused) exactly as before, and no byte outside a destination is written.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "io_test_support.hpp"
#include "page_fill.hpp"
#include "qload/io/reader.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

const std::uint64_t kPage = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));

// Fresh memory: an anonymous private mapping (or, with `shared_file`, a shared mapping of that
// file), unmapped on destruction.
class Mapping {
 public:
  explicit Mapping(std::size_t bytes, int shared_file = -1)
      : bytes_(bytes),
        data_(static_cast<std::byte*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                             shared_file >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, shared_file,
                                             0))) {
    REQUIRE(data_ != MAP_FAILED);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(data_, bytes_); }
  std::span<std::byte> span() const { return {data_, bytes_}; }

 private:
  std::size_t bytes_;
  std::byte* data_;
};

std::unique_ptr<io::Reader> pread_reader(std::uint32_t depth = 4) {
  return make_test_reader({io::EngineKind::kPread, io::DirectMode::kOff}, depth);
}

bool filler_available() {
  return io::page_filling_available();
}

bool all_zero(std::span<const std::byte> bytes) {
  return std::ranges::all_of(bytes, [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace

TEST_CASE("page filling: whole_pages is the page-aligned middle of a span", "[io][page_fill]") {
  Mapping m(8 * kPage);
  const std::span<std::byte> all = m.span();
  CHECK(io::detail::PageFiller::whole_pages(all).size() == 8 * kPage);
  const std::span<std::byte> middle = io::detail::PageFiller::whole_pages(all.subspan(1, 5 * kPage));
  CHECK(middle.data() == all.data() + kPage);
  CHECK(middle.size() == 4 * kPage);
  CHECK(io::detail::PageFiller::whole_pages(all.subspan(1, kPage)).empty());
  CHECK(io::detail::PageFiller::whole_pages({}).empty());
}

TEST_CASE("page filling: unaligned reads into fresh memory equal pread, fill their whole pages, write nothing around",
          "[io][page_fill]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  const std::size_t size = (12u << 20) + 1234;
  write_file(path, random_bytes(size, 11));
  const bool fills = filler_available();
  if (!fills) WARN("userfaultfd is unavailable here: reads are checked, filling is not exercised");
  // Several requests at once into one fresh mapping, neighbours sharing their edge pages.
  Mapping memory(size + 3 * kPage);
  auto reader = pread_reader();
  const io::FileId id = reader->open_file(path).value();
  const std::uint64_t file_at[] = {777, 3u << 20, (7u << 20) + 5, (9u << 20) + 4096};
  const std::uint64_t lengths[] = {(3u << 20) - 777 - 100, (4u << 20) + 5, (2u << 20) + 4091, (3u << 20) + 1234 - 4096};
  std::vector<io::ReadRequest> requests;
  std::uint64_t at = 100;  // memory offset of the first destination: not page-aligned
  for (std::size_t i = 0; i < std::size(file_at); ++i) {
    requests.push_back({.file = id,
                        .offset = file_at[i],
                        .dest = memory.span().subspan(at, lengths[i]),
                        .tag = i,
                        .fill_pages = true});
    at += lengths[i];
  }
  REQUIRE(io::read_all(*reader, requests));
  for (const io::ReadRequest& r : requests) {
    INFO("file offset " << r.offset);
    CHECK(std::memcmp(r.dest.data(), read_file_range(path, r.offset, r.dest.size()).data(), r.dest.size()) == 0);
  }
  CHECK(all_zero(memory.span().first(100)));
  CHECK(all_zero(memory.span().subspan(at)));
  const io::ReaderStats stats = reader->stats();
  CHECK(stats.bytes == at - 100);
  if (fills) {
    // Every request's whole pages: a page two destinations share is neither's.
    std::uint64_t whole = 0;
    for (const io::ReadRequest& r : requests) whole += io::detail::PageFiller::whole_pages(r.dest).size();
    CHECK(stats.filled_bytes == whole);
  } else {
    CHECK(stats.filled_bytes == 0);
  }
}

TEST_CASE("page filling: pages already present are read, and so is memory that is not private anonymous",
          "[io][page_fill]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  const std::size_t size = 8u << 20;
  write_file(path, random_bytes(size, 12));
  const std::vector<std::byte> want = read_file_range(path, 0, size);

  SECTION("every other 2 MiB piece touched first") {
    Mapping memory(size);
    for (std::size_t at = 2u << 20; at < size; at += 4u << 20) memory.span()[at + 17] = std::byte{1};
    auto reader = pread_reader();
    const io::ReadRequest r{.file = reader->open_file(path).value(), .dest = memory.span(), .fill_pages = true};
    REQUIRE(io::read_all(*reader, std::span(&r, 1)));
    CHECK(std::memcmp(memory.span().data(), want.data(), size) == 0);
    CHECK(reader->stats().filled_bytes <= (2u << 20));  // only the piece before the first touched one
  }
  SECTION("a request that does not allow it") {
    Mapping memory(size);
    auto reader = pread_reader();
    const io::ReadRequest r{.file = reader->open_file(path).value(), .dest = memory.span()};
    REQUIRE(io::read_all(*reader, std::span(&r, 1)));
    CHECK(std::memcmp(memory.span().data(), want.data(), size) == 0);
    CHECK(reader->stats().filled_bytes == 0);
  }
  SECTION("a shared mapping of a file") {
    const std::string backing = dir.file("backing.bin");
    write_file(backing, std::vector<std::byte>(size));
    const int fd = ::open(backing.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    {
      Mapping memory(size, fd);
      auto reader = pread_reader();
      const io::ReadRequest r{.file = reader->open_file(path).value(), .dest = memory.span(), .fill_pages = true};
      REQUIRE(io::read_all(*reader, std::span(&r, 1)));
      CHECK(std::memcmp(memory.span().data(), want.data(), size) == 0);
      CHECK(reader->stats().filled_bytes == 0);
    }
    ::close(fd);
  }
}

TEST_CASE("page filling: a file cut short after it was opened fails the read naming it, without a signal",
          "[io][page_fill]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  const std::size_t size = 8u << 20;
  write_file(path, random_bytes(size, 13));
  auto reader = pread_reader();
  const io::FileId id = reader->open_file(path).value();
  REQUIRE(::truncate(path.c_str(), 3u << 20) == 0);
  Mapping memory(size);
  const io::ReadRequest r{.file = id, .dest = memory.span(), .fill_pages = true};
  const Status status = io::read_all(*reader, std::span(&r, 1));
  REQUIRE_FALSE(status);
  CHECK(status.error().code() == Errc::kTruncated);
  CHECK_THAT(status.error().to_string(), Catch::Contains(path));
  // What the file still holds landed; what it lost did not.
  CHECK(std::memcmp(memory.span().data(), read_file_range(path, 0, 3u << 20).data(), 3u << 20) == 0);
}
