// Shared host memory read by another process: a forked child publishes its buffer's address
// and the parent maps it and reads the child's bytes; addresses round-trip through text; an
// address whose inode or machine is not the memory's is refused, never read.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "qload/dist/peer_memory.hpp"

using namespace qload;

namespace {

std::byte pattern(std::size_t i) {
  return static_cast<std::byte>((i * 37 + i / 4096) & 0xff);
}

}  // namespace

TEST_CASE("peer memory: another process's shared buffer is read in place", "[runtime][peer]") {
  constexpr std::size_t kBytes = (std::size_t{3} << 20) + 123;
  int to_parent[2], to_child[2];
  REQUIRE(::pipe(to_parent) == 0);
  REQUIRE(::pipe(to_child) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the owner: fill, publish, wait until the parent has read
    auto buffer = HostBuffer::allocate_shared(kBytes, 4096);
    if (!buffer) ::_exit(2);
    for (std::size_t i = 0; i < kBytes; ++i) buffer->data()[i] = pattern(i);
    auto address = address_of(*buffer);
    if (!address) ::_exit(3);
    const std::string text = address->to_string() + "\n";
    if (::write(to_parent[1], text.data(), text.size()) != static_cast<ssize_t>(text.size())) ::_exit(4);
    char done = 0;
    (void)::read(to_child[0], &done, 1);
    ::_exit(0);
  }
  std::string text;
  char c = 0;
  while (::read(to_parent[0], &c, 1) == 1 && c != '\n') text.push_back(c);
  const auto address = PeerAddress::parse(text);
  REQUIRE(address.has_value());
  CHECK(address->pid == child);
  CHECK(address->bytes == kBytes);
  CHECK(address->machine == machine_id());
  {
    auto peer = map_peer_memory(*address);
    if (!peer) FAIL(peer.error().to_string());
    REQUIRE(peer->size() == kBytes);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < kBytes; ++i) wrong += peer->data()[i] != pattern(i) ? 1 : 0;
    CHECK(wrong == 0);
    // Not what the address names: refused before anything is read.
    PeerAddress other_inode = *address;
    ++other_inode.inode;
    auto refused = map_peer_memory(other_inode);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code() == Errc::kIo);
    PeerAddress elsewhere = *address;
    elsewhere.machine = "another-machine";
    auto far = map_peer_memory(elsewhere);
    REQUIRE_FALSE(far);
    CHECK(far.error().code() == Errc::kUnsupported);
  }
  REQUIRE(::write(to_child[1], "x", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
}

TEST_CASE("peer memory: addresses round-trip as text; a plain buffer has none", "[runtime][peer]") {
  const PeerAddress a{.machine = "m-1", .pid = 42, .fd = 7, .device = 9, .inode = 123456789, .bytes = 1ull << 40};
  CHECK(PeerAddress::parse(a.to_string()) == a);
  CHECK_FALSE(PeerAddress::parse("m-1 42 7"));
  CHECK_FALSE(PeerAddress::parse(a.to_string() + " extra"));
  auto plain = HostBuffer::allocate(4096);
  REQUIRE(plain);
  CHECK_FALSE(address_of(*plain));
  auto shared = HostBuffer::allocate_shared(8192, 1u << 21);  // aligned beyond a page
  REQUIRE(shared);
  CHECK(reinterpret_cast<std::uintptr_t>(shared->data()) % (1u << 21) == 0);
  std::memset(shared->data(), 0x5a, shared->size());
  auto self = map_peer_memory(address_of(*shared).value());
  REQUIRE(self);
  CHECK(self->data()[8191] == std::byte{0x5a});
  shared->data()[8191] = std::byte{1};  // the same memory, not a copy
  CHECK(self->data()[8191] == std::byte{1});
}
