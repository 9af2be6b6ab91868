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
// With --direct it is the cold-read ceiling of issue 48 (bench/cpu_load_bench.py): each file
// is opened with O_DIRECT and read whole, in 8 MiB pieces the N threads take in turn, into one
// buffer where each file's image starts at a 2 MiB-aligned address; the last read of a file
// is rounded up to 4 KiB (the file's end cuts it short), so the buffer leaves room for that.
// The page cache is bypassed, so a warm run reads the device again. A filesystem that refuses
// O_DIRECT (tmpfs on older kernels, some FUSE and network filesystems) is a clear error.
//
// Usage: qload_plain_read [--threads N] [--direct] FILE...
// Prints one JSON object {mode, bytes, seconds, gbps, threads, peak_rss_bytes}; mode is
// "buffered" or "direct".
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

constexpr std::size_t kPiece = 64u << 20;          // one read() call; the kernel clamps at 2 GiB anyway
constexpr std::size_t kDirectPiece = 8u << 20;     // one O_DIRECT read
constexpr std::size_t kDirectBlock = 4096;         // O_DIRECT's unit for offset, length and address
constexpr std::size_t kImageAlignment = 2u << 20;  // where each file's image starts (a huge page)

struct Options {
  unsigned threads = 1;
  bool direct = false;
  int first_file = 0;  // index into argv
};

struct File {
  qload::UniqueFd fd;
  std::size_t size_bytes = 0;
  const char* path = nullptr;
};

struct Piece {
  int fd;
  off_t offset;
  std::size_t bytes;          // what the file holds there
  std::size_t request_bytes;  // what is asked for: `bytes`, or more where a direct read rounds up
  std::byte* out;
  const char* path;
};

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

int fail(const char* what, const char* path, int error, bool direct) {
  std::fprintf(stderr, "qload_plain_read: %s %s: %s%s\n", what, path, std::strerror(error),
               direct && error == EINVAL ? " (the filesystem refuses O_DIRECT; run without --direct)" : "");
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

// Parses [--threads N] [--direct] in any order, then at least one FILE; false (after saying
// why) on anything else.
bool parse_options(int argc, char** argv, Options& options) {
  int i = 1;
  for (; i < argc && std::string_view(argv[i]).starts_with("--"); ++i) {
    const std::string_view arg(argv[i]);
    if (arg == "--direct") {
      options.direct = true;
    } else if (arg == "--threads" && i + 1 < argc) {
      const std::string_view n(argv[++i]);
      if (std::from_chars(n.data(), n.data() + n.size(), options.threads).ec != std::errc{} || options.threads == 0) {
        std::fprintf(stderr, "qload_plain_read: --threads takes a positive number\n");
        return false;
      }
    } else {
      break;  // an unknown option, or --threads without its number
    }
  }
  options.first_file = i;
  const bool ok = i < argc && !std::string_view(argv[i]).starts_with("--");
  if (!ok) std::fprintf(stderr, "usage: qload_plain_read [--threads N] [--direct] FILE...\n");
  return ok;
}

// Opens every file (with O_DIRECT when asked) and takes its size; 0 or the exit status.
int open_files(int argc, char** argv, const Options& options, std::vector<File>& files) {
  const int flags = O_RDONLY | O_CLOEXEC | (options.direct ? O_DIRECT : 0);
  for (int i = options.first_file; i < argc; ++i) {
    File file{qload::UniqueFd(::open(argv[i], flags)), 0, argv[i]};
    if (!file.fd) return fail("open", argv[i], errno, options.direct);
    const off_t size = ::lseek(file.fd.get(), 0, SEEK_END);
    if (size < 0) return fail("seek", argv[i], errno, options.direct);
    file.size_bytes = static_cast<std::size_t>(size);
    files.push_back(std::move(file));
  }
  return 0;
}

// Where each file's image starts in the buffer, and the buffer's size. Buffered: back to back.
// Direct: each at a 2 MiB-aligned offset, with room for its last read rounded up to 4 KiB.
struct Layout {
  std::vector<std::size_t> starts;
  std::size_t size_bytes = 0;
};

Layout lay_out(const std::vector<File>& files, bool direct) {
  Layout layout;
  for (const File& file : files) {
    const std::size_t start = direct ? round_up(layout.size_bytes, kImageAlignment) : layout.size_bytes;
    layout.starts.push_back(start);
    layout.size_bytes = start + (direct ? round_up(file.size_bytes, kDirectBlock) : file.size_bytes);
  }
  return layout;
}

// Cuts every file into pieces of the mode's size, each aimed at its place in `base`.
std::vector<Piece> cut_pieces(const std::vector<File>& files, const Layout& layout, std::byte* base, bool direct) {
  const std::size_t piece_bytes = direct ? kDirectPiece : kPiece;
  std::vector<Piece> pieces;
  for (std::size_t f = 0; f < files.size(); ++f) {
    const File& file = files[f];
    for (std::size_t offset = 0; offset < file.size_bytes; offset += piece_bytes) {
      const std::size_t bytes = std::min(piece_bytes, file.size_bytes - offset);
      const std::size_t request = direct ? round_up(bytes, kDirectBlock) : bytes;
      pieces.push_back(
          {file.fd.get(), static_cast<off_t>(offset), bytes, request, base + layout.starts[f] + offset, file.path});
    }
  }
  return pieces;
}

// Reads one piece in full; returns 0 or the errno of the failure (EIO for a short file).
int read_piece(const Piece& piece) {
  std::size_t done = 0;
  while (done < piece.bytes) {
    const ssize_t n =
        ::pread(piece.fd, piece.out + done, piece.request_bytes - done, piece.offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;  // the file shrank while being read
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

struct Failure {
  int error = 0;
  std::size_t piece = 0;
};

// `threads` threads (this one among them) take the pieces in turn until all are read or one
// fails.
Failure read_all(const std::vector<Piece>& pieces, unsigned threads) {
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
  return {error.load(), failed_piece.load()};
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) return 64;
  const auto start = std::chrono::steady_clock::now();
  std::vector<File> files;
  if (const int status = open_files(argc, argv, options, files); status != 0) return status;
  const Layout layout = lay_out(files, options.direct);
  auto buffer = qload::HostBuffer::allocate(layout.size_bytes, options.direct ? kImageAlignment : 4096);
  if (!buffer) {
    std::fprintf(stderr, "qload_plain_read: %s\n", buffer.error().to_string().c_str());
    return 71;
  }
  const std::vector<Piece> pieces = cut_pieces(files, layout, buffer->data(), options.direct);
  if (const Failure failure = read_all(pieces, options.threads); failure.error != 0)
    return fail("read", pieces[failure.piece].path, failure.error, options.direct);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::size_t total = 0;
  for (const File& file : files) total += file.size_bytes;
  std::printf(
      "{\"mode\": \"%s\", \"bytes\": %zu, \"seconds\": %.6f, \"gbps\": %.4f, \"threads\": %u, \"peak_rss_bytes\": "
      "%zu}\n",
      options.direct ? "direct" : "buffered", total, seconds, static_cast<double>(total) / seconds / 1e9,
      options.threads, peak_rss_bytes());
  return 0;
}
