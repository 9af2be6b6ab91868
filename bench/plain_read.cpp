// The hand-written reader, as the load benchmarks' baseline: read every file with plain
// read()/pread() calls straight into one host buffer big enough for all of them.
//
// The buffer comes from the same allocator as qload's host arena (anonymous mmap, huge pages
// advised), so the baseline pays the same first-touch cost a loader must pay to hold the
// weights; `dd of=/dev/null` measures only the copy into a reused, cache-hot block.
//
// With --threads 1 (the default) it is the naive loader: one thread, files in order. With
// --threads N it is the best simple reader a user could write: N threads take 64 MiB pieces of
// the files in turn and pread() them into place (bench/peers/ uses N = the number of cores).
//
// Usage: qload_plain_read [--threads N] FILE...
// Prints one JSON object {bytes, seconds, gbps, threads, peak_rss_bytes}.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace {

constexpr std::size_t kPiece = 64u << 20;  // one read() call; the kernel clamps at 2 GiB anyway

struct Piece {
  int fd;
  off_t offset;
  std::size_t bytes;
  std::byte* out;
  const char* path;
};

int fail(const char* what, const char* path, int error) {
  std::fprintf(stderr, "qload_plain_read: %s %s: %s\n", what, path, std::strerror(error));
  return 74;
}

// This process's own peak resident set (VmHWM of /proc/self/status), in bytes; 0 if unknown.
std::size_t peak_rss_bytes() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof line, status) != nullptr)
    if (std::sscanf(line, "VmHWM: %zu kB", &kib) == 1) break;
  std::fclose(status);
  return kib * 1024;
}

// Reads one piece in full; returns 0 or the errno of the failure (EIO for a short file).
int read_piece(const Piece& piece) {
  std::size_t done = 0;
  while (done < piece.bytes) {
    const ssize_t n = ::pread(piece.fd, piece.out + done, piece.bytes - done, piece.offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;  // the file shrank while being read
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = 1;
  int first_file = 1;
  if (argc > 2 && std::string_view(argv[1]) == "--threads") {
    const std::string_view n(argv[2]);
    if (std::from_chars(n.data(), n.data() + n.size(), threads).ec != std::errc{} || threads == 0) {
      std::fprintf(stderr, "qload_plain_read: --threads takes a positive number\n");
      return 64;
    }
    first_file = 3;
  }
  if (first_file >= argc) {
    std::fprintf(stderr, "usage: qload_plain_read [--threads N] FILE...\n");
    return 64;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<qload::UniqueFd> fds;
  std::vector<std::size_t> sizes;
  std::size_t total = 0;
  for (int i = first_file; i < argc; ++i) {
    qload::UniqueFd fd(::open(argv[i], O_RDONLY | O_CLOEXEC));
    if (!fd) return fail("open", argv[i], errno);
    const off_t size = ::lseek(fd.get(), 0, SEEK_END);
    if (size < 0) return fail("seek", argv[i], errno);
    total += static_cast<std::size_t>(size);
    sizes.push_back(static_cast<std::size_t>(size));
    fds.push_back(std::move(fd));
  }
  auto buffer = qload::HostBuffer::allocate(total);
  if (!buffer) {
    std::fprintf(stderr, "qload_plain_read: %s\n", buffer.error().to_string().c_str());
    return 71;
  }
  std::vector<Piece> pieces;
  std::byte* out = buffer->data();
  for (std::size_t f = 0; f < fds.size(); ++f) {
    for (std::size_t offset = 0; offset < sizes[f]; offset += kPiece) {
      const std::size_t bytes = std::min(kPiece, sizes[f] - offset);
      pieces.push_back({fds[f].get(), static_cast<off_t>(offset), bytes, out, argv[first_file + static_cast<int>(f)]});
      out += bytes;
    }
  }
  std::atomic<std::size_t> next{0};
  std::atomic<int> error{0};
  std::atomic<std::size_t> failed_piece{0};
  auto reader = [&] {
    for (std::size_t i = next++; i < pieces.size() && error.load() == 0; i = next++) {
      if (const int e = read_piece(pieces[i]); e != 0) {
        failed_piece = i;
        error = e;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(reader);
  reader();
  for (auto& t : pool) t.join();
  if (error.load() != 0) return fail("read", pieces[failed_piece.load()].path, error.load());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"bytes\": %zu, \"seconds\": %.6f, \"gbps\": %.4f, \"threads\": %u, \"peak_rss_bytes\": %zu}\n", total,
              seconds, static_cast<double>(total) / seconds / 1e9, threads, peak_rss_bytes());
  return 0;
}
