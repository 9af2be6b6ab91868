// The naive loader, as the load benchmark's baseline: read every file, in order, with plain
// read() calls straight into one host buffer big enough for all of them.
//
// The buffer comes from the same allocator as qload's host arena (anonymous mmap, huge pages
// advised), so the baseline pays the same first-touch cost a loader must pay to hold the
// weights; `dd of=/dev/null` measures only the copy into a reused, cache-hot block.
//
// Usage: qload_plain_read FILE...   prints one JSON object {bytes, seconds, gbps}.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace {

constexpr std::size_t kMaxRead = 64u << 20;  // one read() call; the kernel clamps at 2 GiB anyway

int fail(const char* what, const char* path) {
  std::fprintf(stderr, "qload_plain_read: %s %s: %s\n", what, path, std::strerror(errno));
  return 74;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: qload_plain_read FILE...\n");
    return 64;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<qload::UniqueFd> fds;
  std::size_t total = 0;
  for (int i = 1; i < argc; ++i) {
    qload::UniqueFd fd(::open(argv[i], O_RDONLY | O_CLOEXEC));
    if (!fd) return fail("open", argv[i]);
    const off_t size = ::lseek(fd.get(), 0, SEEK_END);
    if (size < 0 || ::lseek(fd.get(), 0, SEEK_SET) != 0) return fail("seek", argv[i]);
    total += static_cast<std::size_t>(size);
    fds.push_back(std::move(fd));
  }
  auto buffer = qload::HostBuffer::allocate(total);
  if (!buffer) {
    std::fprintf(stderr, "qload_plain_read: %s\n", buffer.error().to_string().c_str());
    return 71;
  }
  std::byte* out = buffer->data();
  for (std::size_t i = 0; i < fds.size(); ++i) {
    for (;;) {
      const ssize_t n = ::read(fds[i].get(), out, kMaxRead);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail("read", argv[i + 1]);
      if (n == 0) break;
      out += n;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (static_cast<std::size_t>(out - buffer->data()) != total) {
    std::fprintf(stderr, "qload_plain_read: files changed size while being read\n");
    return 74;
  }
  std::printf("{\"bytes\": %zu, \"seconds\": %.6f, \"gbps\": %.4f}\n", total, seconds,
              static_cast<double>(total) / seconds / 1e9);
  return 0;
}
