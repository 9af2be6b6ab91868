// reserve_open_files: a load of a checkpoint with more shards than the soft open-file limit
// raises that limit toward the hard one, and says so by name before opening anything when even
// the hard limit is too low.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include "qload/io/input_file.hpp"

using namespace qload;

namespace {

// Restores RLIMIT_NOFILE as it was, whatever the test did to it.
struct LimitGuard {
  rlimit saved{};
  LimitGuard() { REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0); }
  ~LimitGuard() { ::setrlimit(RLIMIT_NOFILE, &saved); }
};

}  // namespace

TEST_CASE("open files: a soft limit too low for the checkpoint is raised toward the hard one", "[io][limits]") {
  const LimitGuard guard;
  if (guard.saved.rlim_max != RLIM_INFINITY && guard.saved.rlim_max < 4096) {
    WARN("SKIPPED [io][limits]: the hard open-file limit is only " << guard.saved.rlim_max);
    return;
  }
  rlimit low = guard.saved;
  low.rlim_cur = 256;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  REQUIRE(io::reserve_open_files(1000));
  rlimit now{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &now) == 0);
  CHECK(now.rlim_cur >= 1000 * io::kDescriptorsPerFile);
  // Already room: nothing changes.
  REQUIRE(io::reserve_open_files(10));
  rlimit again{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &again) == 0);
  CHECK(again.rlim_cur == now.rlim_cur);
}

TEST_CASE("open files: more files than the hard limit allows are refused by name", "[io][limits]") {
  const LimitGuard guard;
  if (guard.saved.rlim_max == RLIM_INFINITY) {
    WARN("SKIPPED [io][limits]: no hard open-file limit to exceed");
    return;
  }
  const auto refused = io::reserve_open_files(guard.saved.rlim_max);  // one descriptor each is too many
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::kUnsupported);
  CHECK_THAT(refused.error().message(), Catch::Contains("ulimit -n"));
  rlimit now{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &now) == 0);
  CHECK(now.rlim_cur == guard.saved.rlim_cur);  // left as it was
}
