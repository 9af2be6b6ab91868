#include "qload/runtime/unique_fd.hpp"

#include <unistd.h>

namespace qload {

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace qload
