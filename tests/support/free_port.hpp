// A TCP port nothing listens on now (the kernel's pick for an ephemeral bind), for tests that
// run a rendezvous on this machine.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

#include "qload/runtime/unique_fd.hpp"

namespace qload::testing {

inline std::uint16_t free_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 0;
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  return ntohs(addr.sin_port);
}

}  // namespace qload::testing
