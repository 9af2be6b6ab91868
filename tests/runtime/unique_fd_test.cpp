// UniqueFd: closes on destruction and reset, transfers ownership on move, gives it up on release.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "qload/runtime/unique_fd.hpp"

namespace {

using qload::UniqueFd;

int open_dev_null() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  return fd;
}

// True when `fd` is not an open descriptor of this process.
bool is_closed(int fd) {
  errno = 0;
  return ::fcntl(fd, F_GETFD) == -1 && errno == EBADF;
}

}  // namespace

TEST_CASE("UniqueFd default-constructed is invalid", "[unique_fd]") {
  const UniqueFd fd;
  CHECK(fd.get() == -1);
  CHECK_FALSE(fd.valid());
  CHECK_FALSE(static_cast<bool>(fd));
}

TEST_CASE("UniqueFd closes its descriptor on destruction", "[unique_fd]") {
  const int raw = open_dev_null();
  {
    const UniqueFd fd(raw);
    CHECK(fd.get() == raw);
    CHECK(fd.valid());
    CHECK(static_cast<bool>(fd));
    CHECK_FALSE(is_closed(raw));
  }
  CHECK(is_closed(raw));
}

TEST_CASE("UniqueFd reset closes the old descriptor and owns the new one", "[unique_fd]") {
  const int first = open_dev_null();
  const int second = open_dev_null();
  {
    UniqueFd fd(first);
    fd.reset(second);
    CHECK(is_closed(first));
    CHECK(fd.get() == second);
    CHECK_FALSE(is_closed(second));
    fd.reset();
    CHECK(is_closed(second));
    CHECK_FALSE(fd.valid());
    CHECK(fd.get() == -1);
  }
}

TEST_CASE("UniqueFd move construction transfers ownership", "[unique_fd]") {
  const int raw = open_dev_null();
  {
    UniqueFd a(raw);
    UniqueFd b(std::move(a));
    CHECK(a.get() == -1);  // NOLINT(bugprone-use-after-move): moved-from state is specified
    CHECK_FALSE(a.valid());
    CHECK(b.get() == raw);
    {
      UniqueFd c(std::move(b));
      CHECK_FALSE(b.valid());
      CHECK_FALSE(is_closed(raw));
    }
    CHECK(is_closed(raw));  // closed exactly by the last owner
  }
}

TEST_CASE("UniqueFd move assignment closes the target's descriptor", "[unique_fd]") {
  const int first = open_dev_null();
  const int second = open_dev_null();
  {
    UniqueFd a(first);
    UniqueFd b(second);
    a = std::move(b);
    CHECK(is_closed(first));
    CHECK(a.get() == second);
    CHECK_FALSE(b.valid());
    CHECK_FALSE(is_closed(second));

    // Self-move keeps the descriptor open.
    UniqueFd& self = a;
    a = std::move(self);
    CHECK(a.get() == second);
    CHECK_FALSE(is_closed(second));
  }
  CHECK(is_closed(second));
}

TEST_CASE("UniqueFd release gives up ownership without closing", "[unique_fd]") {
  const int raw = open_dev_null();
  int released = -1;
  {
    UniqueFd fd(raw);
    released = fd.release();
    CHECK(fd.get() == -1);
    CHECK_FALSE(fd.valid());
    CHECK(fd.release() == -1);
  }
  CHECK(released == raw);
  CHECK_FALSE(is_closed(raw));
  CHECK(::close(raw) == 0);
}
