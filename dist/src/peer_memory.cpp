#include "qload/dist/peer_memory.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "qload/runtime/unique_fd.hpp"

namespace qload {

std::string PeerAddress::to_string() const {
  return fmt::format("{} {} {} {} {} {}", machine.empty() ? "-" : machine, pid, fd, device, inode, bytes);
}

std::optional<PeerAddress> PeerAddress::parse(std::string_view text) {
  std::istringstream in{std::string(text)};
  PeerAddress a;
  if (!(in >> a.machine >> a.pid >> a.fd >> a.device >> a.inode >> a.bytes)) return std::nullopt;
  std::string extra;
  if (in >> extra) return std::nullopt;
  if (a.machine == "-") a.machine.clear();
  return a;
}

std::string machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(in >> id)) return {};
  return id;
}

Result<PeerAddress> address_of(const HostBuffer& buffer) {
  if (buffer.shared_fd() < 0) return fail(Errc::kInvalidArgument, "the host buffer is not shared memory");
  struct stat st {};
  if (::fstat(buffer.shared_fd(), &st) != 0) return fail(Error::from_errno(errno, "fstat of shared memory"));
  return PeerAddress{.machine = machine_id(),
                     .pid = ::getpid(),
                     .fd = buffer.shared_fd(),
                     .device = static_cast<std::uint64_t>(st.st_dev),
                     .inode = static_cast<std::uint64_t>(st.st_ino),
                     .bytes = buffer.size()};
}

Result<MappedRegion> map_peer_memory(const PeerAddress& address) {
  if (address.machine.empty() || address.machine != machine_id())
    return fail(Errc::kUnsupported, fmt::format("process {}'s memory is on another machine", address.pid));
  const std::string path = fmt::format("/proc/{}/fd/{}", address.pid, address.fd);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(Error::from_errno(errno, "opening " + path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(Error::from_errno(errno, "fstat of " + path));
  if (static_cast<std::uint64_t>(st.st_dev) != address.device ||
      static_cast<std::uint64_t>(st.st_ino) != address.inode || static_cast<std::uint64_t>(st.st_size) < address.bytes)
    return fail(Errc::kIo,
                fmt::format("{} is not process {}'s shared memory (another pid namespace?)", path, address.pid));
  // Read-only and private: the owner's writes stay visible (no page of it is ever copied).
  return MappedRegion::map(fd.get(), 0, address.bytes, path);
}

}  // namespace qload
