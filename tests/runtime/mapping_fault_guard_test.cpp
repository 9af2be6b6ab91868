// A file truncated under a mapping: a guarded read becomes kFileChanged naming the file and
// offset; a fault outside any guarded read still kills the process as before.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdint>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "qload/runtime/mapped_region.hpp"
#include "qload/runtime/mapping_fault_guard.hpp"
#include "qload/runtime/unique_fd.hpp"
#include "support/scratch.hpp"

using namespace qload;

#if defined(__SANITIZE_ADDRESS__)
#define QLOAD_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QLOAD_TEST_UNDER_ASAN 1
#endif
#endif
#ifndef QLOAD_TEST_UNDER_ASAN
#define QLOAD_TEST_UNDER_ASAN 0
#endif

namespace {

constexpr int kSwallowed = 42;  // the child's exit code if it read past the end unharmed

struct Sum {
  std::span<const std::byte> bytes;
  std::uint64_t total = 0;
};

void sum_bytes(void* context) {
  auto* s = static_cast<Sum*>(context);
  for (const std::byte b : s->bytes) s->total += static_cast<std::uint8_t>(b);
}

// A scratch file of `pages` pages of 1s, open read-write (to truncate it) and mapped whole.
struct MappedFile {
  explicit MappedFile(std::size_t pages) {
    testing::write_file(path, std::vector<std::byte>(pages * page, std::byte{1}));
    fd = UniqueFd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE(fd.get() >= 0);
    auto mapped = MappedRegion::map(fd.get(), 0, pages * page, path);
    REQUIRE(mapped);
    region = std::move(*mapped);
  }
  testing::ScratchDir dir;
  std::string path = dir.file("shard.bin");
  std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  UniqueFd fd;
  std::optional<MappedRegion> region;
};

}  // namespace

TEST_CASE("a guarded read of a mapping whose file shrank is an error naming the file and offset",
          "[mapping_fault_guard]") {
  MappedFile file(3);
  const std::string& path = file.path;
  const std::size_t page = file.page;
  auto& region = file.region;
  auto& fd = file.fd;
  const std::span<const std::byte> all(region->data(), 3 * page);

  Sum before{all};
  REQUIRE(guarded_mapped_read(all, path, 4096, sum_bytes, &before));
  CHECK(before.total == 3 * page);

  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(page)) == 0);
  Sum first_page{all.first(page)};
  REQUIRE(guarded_mapped_read(first_page.bytes, path, 4096, sum_bytes, &first_page));  // still inside the file
  CHECK(first_page.total == page);

  // Again and from several threads at once: the handler stays installed and per-thread.
  std::vector<std::thread> threads;
  std::vector<int> failed(4, 0);
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 3; ++k) {
        Sum s{all};
        auto status = guarded_mapped_read(all, path, 4096, sum_bytes, &s);
        if (!status && status.error().code() == Errc::kFileChanged && status.error().file() == path &&
            status.error().offset() == 4096 + page)
          ++failed[static_cast<std::size_t>(i)];
      }
    });
  for (std::thread& t : threads) t.join();
  CHECK(failed == std::vector<int>(4, 3));

  Sum after{all};
  auto status = guarded_mapped_read(all, path, 4096, sum_bytes, &after);
  REQUIRE_FALSE(status);
  CHECK_THAT(status.error().to_string(), Catch::Contains("shrank while qload read it"));
}

TEST_CASE("a fault outside a guarded read still takes the default action", "[mapping_fault_guard]") {
  MappedFile file(2);
  const std::string& path = file.path;
  const std::size_t page = file.page;
  auto& region = file.region;
  auto& fd = file.fd;
  Sum warm{{region->data(), page}};
  REQUIRE(guarded_mapped_read(warm.bytes, path, 0, sum_bytes, &warm));  // installs the handler
  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(page)) == 0);

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    Sum s{{region->data(), 2 * page}};
    sum_bytes(&s);                                  // unguarded: must not be swallowed
    ::_exit(s.total == 2 * page ? kSwallowed : 3);  // uses the sum, so the reads happen
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO("child status " << status);
  CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == kSwallowed));
#if QLOAD_TEST_UNDER_ASAN
  // The handler before ours is AddressSanitizer's: it reports the fault and exits non-zero.
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) != 0));
#else
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGBUS);
#endif
}
