// Reading another process's shared host memory (HostBuffer::allocate_shared) on the same
// machine, without copying it through a socket: the owner publishes a PeerAddress, and a peer
// maps it read-only through /proc/<pid>/fd/<fd>. The address carries the memory's device and
// inode, so a pid that names another process (a peer in another pid namespace, a recycled pid)
// is refused rather than read.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "qload/runtime/error.hpp"
#include "qload/runtime/host_buffer.hpp"

namespace qload {

struct PeerAddress {
  std::string machine;  // machine_id() of the owner
  std::int64_t pid = 0;
  int fd = -1;
  std::uint64_t device = 0;  // st_dev and st_ino of the memory's file
  std::uint64_t inode = 0;
  std::uint64_t bytes = 0;

  std::string to_string() const;  // one line of fields, for the rendezvous
  static std::optional<PeerAddress> parse(std::string_view text);
  bool operator==(const PeerAddress&) const = default;
};

// Who this machine is to PeerAddress: the kernel's boot id (empty when unknown).
std::string machine_id();

// The address of `buffer`'s memory (made by allocate_shared); kInvalidArgument otherwise.
Result<PeerAddress> address_of(const HostBuffer& buffer);

// A read-only mapping of a peer's shared memory.
class PeerMemory {
 public:
  PeerMemory() = default;
  PeerMemory(PeerMemory&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  PeerMemory& operator=(PeerMemory&& other) noexcept;
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;
  ~PeerMemory() { reset(); }

  // kUnsupported when the address is another machine's; kIo (with why) when the memory cannot
  // be opened or is not the one the address names.
  static Result<PeerMemory> map(const PeerAddress& address);

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  void reset() noexcept;

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace qload
