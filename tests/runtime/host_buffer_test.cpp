// HostBuffer: aligned, zero-filled anonymous mappings that are returned to the OS on reset.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "qload/runtime/host_buffer.hpp"

namespace {

using qload::Errc;
using qload::HostBuffer;

constexpr std::size_t kMiB = std::size_t{1} << 20;

bool aligned_to(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

bool all_zero(const HostBuffer& b) {
  return std::all_of(b.data(), b.data() + b.size(), [](std::byte x) { return x == std::byte{0}; });
}

struct MapsSummary {
  std::size_t lines = 0;
  std::uint64_t bytes = 0;  // total size of all mappings
};

MapsSummary read_maps() {
  MapsSummary s;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    ++s.lines;
    const auto dash = line.find('-');
    const auto space = line.find(' ');
    if (dash == std::string::npos || space == std::string::npos) continue;
    const std::uint64_t lo = std::stoull(line.substr(0, dash), nullptr, 16);
    const std::uint64_t hi = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
    s.bytes += hi - lo;
  }
  return s;
}

}  // namespace

TEST_CASE("HostBuffer default-constructed is empty", "[host_buffer]") {
  const HostBuffer b;
  CHECK(b.empty());
  CHECK(b.size() == 0);
  CHECK(b.data() == nullptr);
  CHECK(b.span().empty());
}

TEST_CASE("HostBuffer allocate honours the requested alignment and zero-fills", "[host_buffer]") {
  const std::size_t sizes[] = {1, 4096, 12345, 3 * kMiB + 17};
  const std::size_t alignments[] = {4096, std::size_t{1} << 16, 2 * kMiB};
  for (std::size_t size : sizes) {
    for (std::size_t alignment : alignments) {
      CAPTURE(size, alignment);
      auto r = HostBuffer::allocate(size, alignment);
      REQUIRE(r.has_value());
      HostBuffer& b = *r;
      CHECK_FALSE(b.empty());
      CHECK(b.size() == size);
      CHECK(b.span().size() == size);
      CHECK(b.span().data() == b.data());
      CHECK(aligned_to(b.data(), alignment));
      CHECK(all_zero(b));
      // The whole range is writable.
      std::memset(b.data(), 0xAB, b.size());
      CHECK(b.data()[size - 1] == std::byte{0xAB});
    }
  }
}

TEST_CASE("HostBuffer small alignments are raised to at least the page size", "[host_buffer]") {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t alignment : {std::size_t{1}, std::size_t{8}, std::size_t{64}}) {
    auto r = HostBuffer::allocate(100, alignment);
    REQUIRE(r.has_value());
    CHECK(aligned_to(r->data(), page));
  }
}

TEST_CASE("HostBuffer default alignment is 4096", "[host_buffer]") {
  auto r = HostBuffer::allocate(10000);
  REQUIRE(r.has_value());
  CHECK(aligned_to(r->data(), 4096));
  CHECK(r->size() == 10000);
  CHECK(all_zero(*r));
}

TEST_CASE("HostBuffer of size 0 is an empty buffer", "[host_buffer]") {
  auto r = HostBuffer::allocate(0);
  REQUIRE(r.has_value());
  CHECK(r->empty());
  CHECK(r->size() == 0);
  CHECK(r->span().empty());
}

TEST_CASE("HostBuffer rejects alignments that are not a power of two", "[host_buffer]") {
  for (std::size_t alignment :
       {std::size_t{0}, std::size_t{3}, std::size_t{4095}, std::size_t{6144}, (std::size_t{1} << 21) + 4096}) {
    CAPTURE(alignment);
    const auto r = HostBuffer::allocate(4096, alignment);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
  // Even for an empty buffer.
  const auto empty = HostBuffer::allocate(0, 3);
  REQUIRE_FALSE(empty.has_value());
  CHECK(empty.error().code() == Errc::kInvalidArgument);
}

TEST_CASE("HostBuffer move construction leaves the source empty", "[host_buffer]") {
  auto r = HostBuffer::allocate(8192);
  REQUIRE(r.has_value());
  std::byte* const data = r->data();
  r->data()[5] = std::byte{7};
  HostBuffer moved(std::move(*r));
  CHECK(moved.data() == data);
  CHECK(moved.size() == 8192);
  CHECK(moved.data()[5] == std::byte{7});
  CHECK(r->empty());
  CHECK(r->data() == nullptr);
  CHECK(r->size() == 0);
}

TEST_CASE("HostBuffer move assignment frees the old buffer and leaves the source empty", "[host_buffer]") {
  auto a = HostBuffer::allocate(4096);
  auto b = HostBuffer::allocate(2 * 4096);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  std::byte* const b_data = b->data();
  *a = std::move(*b);
  CHECK(a->data() == b_data);
  CHECK(a->size() == 2 * 4096);
  CHECK(b->empty());
  CHECK(b->data() == nullptr);

  // Self-move keeps the buffer.
  HostBuffer& self = *a;
  *a = std::move(self);
  CHECK(a->data() == b_data);
  CHECK(a->size() == 2 * 4096);
}

TEST_CASE("HostBuffer reset releases and empties", "[host_buffer]") {
  auto r = HostBuffer::allocate(kMiB);
  REQUIRE(r.has_value());
  r->reset();
  CHECK(r->empty());
  CHECK(r->data() == nullptr);
  r->reset();  // twice is fine
  CHECK(r->empty());
}

TEST_CASE("HostBuffer of a huge size fails with an error instead of crashing", "[host_buffer]") {
  const auto huge = HostBuffer::allocate(std::size_t{1} << 62);
  REQUIRE_FALSE(huge.has_value());
  CHECK((huge.error().code() == Errc::kOutOfMemory || huge.error().code() == Errc::kOverflow));

  // size + alignment slack would wrap around.
  const auto wraps = HostBuffer::allocate(SIZE_MAX - 4095, 2 * kMiB);
  REQUIRE_FALSE(wraps.has_value());
  CHECK((wraps.error().code() == Errc::kOutOfMemory || wraps.error().code() == Errc::kOverflow));

  const auto max = HostBuffer::allocate(SIZE_MAX);
  REQUIRE_FALSE(max.has_value());
  CHECK((max.error().code() == Errc::kOutOfMemory || max.error().code() == Errc::kOverflow));
}

TEST_CASE("HostBuffer allocation and destruction do not leak mappings", "[host_buffer]") {
  // Warm up anything that lazily maps memory (the ifstream, the vector below, libc).
  std::vector<HostBuffer> live;
  live.reserve(100);
  (void)read_maps();

  const MapsSummary before = read_maps();
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 100; ++i) {
      // A mix of sizes and alignments: page-aligned, over-aligned (slack), huge-page sized.
      const std::size_t size = (i % 3 == 0) ? 2 * kMiB + 4096 : 4096 * static_cast<std::size_t>(i + 1);
      const std::size_t alignment = (i % 2 == 0) ? 4096 : std::size_t{1} << 16;
      auto r = HostBuffer::allocate(size, alignment);
      REQUIRE(r.has_value());
      r->data()[0] = std::byte{1};  // touch it
      live.push_back(std::move(*r));
    }
    const MapsSummary during = read_maps();
    CHECK(during.bytes > before.bytes);
    live.clear();
  }
  const MapsSummary after = read_maps();
  CAPTURE(before.lines, after.lines, before.bytes, after.bytes);
  CHECK(after.lines <= before.lines);
  CHECK(after.bytes <= before.bytes);
}
