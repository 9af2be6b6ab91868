// Reading another process's shared host memory (HostBuffer::allocate_shared) on the same
// machine, without copying it through a socket: the owner publishes a PeerAddress, and a peer
// maps it read-only through /proc/<pid>/fd/<fd>. The address carries the memory's device and
// inode, so a pid that names another process (a peer in another pid namespace, a recycled pid)
// is refused rather than read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "qload/runtime/error.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/mapped_region.hpp"

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

// A read-only mapping of the peer's shared memory that `address` names. kUnsupported when
// the address is another machine's; kIo (with why) when the memory cannot be opened or is not
// the one the address names.
Result<MappedRegion> map_peer_memory(const PeerAddress& address);

}  // namespace qload
