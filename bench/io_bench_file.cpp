// qload_io_bench's file: a scratch file of random bytes (or the caller's), and making it cold.
#include "io_bench.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "qload/io/digest.hpp"
#include "qload/io/page_cache.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/log.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace qload::bench {
namespace {

Status write_all(int fd, std::span<const std::byte> bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(Error::from_errno(n < 0 ? errno : EIO, "write").with_file(path));
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

// splitmix64: fast, and incompressible enough that no layer below (a compressing or
// deduplicating virtual disk) can shortcut the reads.
void fill_random(std::span<std::byte> block, std::uint64_t& state) {
  for (std::size_t i = 0; i + 8 <= block.size(); i += 8) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::memcpy(block.data() + i, &z, sizeof z);
  }
}

// ---------------------------------------------------------------------------------------------
// The scratch file

Status check_free_space(const std::string& dir, std::uint64_t size) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return fail(Error::from_errno(errno, "statvfs").with_file(dir));
  const std::uint64_t avail = std::uint64_t{vfs.f_bavail} * vfs.f_frsize;
  if (size + size / 10 > avail)
    return fail(Errc::kInvalidArgument,
                fmt::format("{} has {} MiB free; a {} MiB test file does not fit", dir, avail >> 20, size >> 20));
  return {};
}

// Writes `size` pseudo-random bytes with plain write() in big blocks, hashing them on the way
// (that digest is the reference --verify checks every engine against), and fsyncs so that the
// cold runs start from clean pages the kernel is allowed to drop.
Result<std::uint64_t> generate(const std::string& path, std::uint64_t size) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return fail(Error::from_errno(errno, "create test file").with_file(path));
  QLOAD_ASSIGN_OR_RETURN(HostBuffer block, HostBuffer::allocate(kWriteBlock));
  io::Xxh3Stream hash;
  std::uint64_t state = 0x716c6f6164ULL;  // fixed seed: same bytes on every machine
  for (std::uint64_t done = 0; done < size;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kWriteBlock, size - done));
    fill_random(block.span(), state);
    const std::span<const std::byte> bytes(block.data(), n);
    QLOAD_TRY(write_all(fd.get(), bytes, path));
    hash.update(bytes);
    done += n;
  }
  if (::fsync(fd.get()) != 0) return fail(Error::from_errno(errno, "fsync").with_file(path));
  return hash.digest64();
}

std::string default_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

}  // namespace

// Uses --file if it exists; otherwise creates the file (at --file, or a scratch name in --dir).
Result<ScratchFile> prepare_file(Context& ctx) {
  const Options& o = ctx.opts;
  if (!o.file.empty() && ::access(o.file.c_str(), F_OK) == 0) {
    fmt::print(stderr, "reusing {}\n", o.file);
    return ScratchFile(o.file, false);
  }
  const std::string dir = o.dir.empty() ? default_dir() : o.dir;
  std::string path = o.file.empty() ? fmt::format("{}/qload_io_bench.{}.bin", dir, ::getpid()) : o.file;
  const std::string parent = std::filesystem::path(path).parent_path().string();
  QLOAD_TRY(check_free_space(parent.empty() ? "." : parent, o.size));
  fmt::print(stderr, "writing {} MiB of pseudo-random bytes to {}\n", o.size >> 20, path);
  ScratchFile file(path, !o.keep);  // from here on a failure removes the partial file
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t digest, generate(path, o.size));
  ctx.reference = digest;
  return file;
}

Status open_file(Context& ctx, const std::string& path) {
  ctx.path = path;
  ctx.fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ctx.fd) return fail(Error::from_errno(errno, "open").with_file(path));
  QLOAD_ASSIGN_OR_RETURN(const io::FileIdentity id, io::identify(ctx.fd.get(), path));
  if (id.size == 0) return fail(Error(Errc::kInvalidArgument, "the test file is empty").with_file(path));
  ctx.size = id.size;
  return {};
}

// ---------------------------------------------------------------------------------------------
// Cold cache

// Empties the page cache of the test file. drop_caches (root) is the honest cold start: it
// also drops the file system's metadata. fadvise(DONTNEED) drops only the file's own pages.
Status drop_cache(const Context& ctx) {
  if (ctx.drop == DropMethod::kFadvise) {
    if (::fdatasync(ctx.fd.get()) != 0) return fail(Error::from_errno(errno, "fdatasync").with_file(ctx.path));
    const int rc = ::posix_fadvise(ctx.fd.get(), 0, 0, POSIX_FADV_DONTNEED);
    if (rc != 0) return fail(Error::from_errno(rc, "posix_fadvise(DONTNEED)").with_file(ctx.path));
    return {};
  }
  ::sync();  // drop_caches leaves dirty pages in place
  UniqueFd fd(::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC));
  if (!fd) return fail(Error::from_errno(errno, "open /proc/sys/vm/drop_caches"));
  if (::write(fd.get(), "3", 1) != 1) return fail(Error::from_errno(errno, "write /proc/sys/vm/drop_caches"));
  return {};
}

// The state a cold run starts from: nothing of the file cached, and (with --settle) the
// freed memory given time to settle. On a VM with free page reporting the pages a drop frees
// are handed back to the host a few seconds later, and page cache built on them afterwards
// costs a host fault per page; reading right after the drop races that (docs/benchmarks.md).
Status make_cold(const Context& ctx) {
  QLOAD_TRY(drop_cache(ctx));
  if (ctx.opts.settle > 0) std::this_thread::sleep_for(std::chrono::duration<double>(ctx.opts.settle));
  return {};
}

// Resolves --drop auto: drop_caches when root and writable (containers often mount /proc/sys
// read-only even for root), fadvise otherwise. The choice is tried once here.
Status choose_drop_method(Context& ctx) {
  const std::string& want = ctx.opts.drop;
  if (want == "fadvise") {
    ctx.drop = DropMethod::kFadvise;
  } else if (want == "drop_caches" || (::geteuid() == 0 && ::access("/proc/sys/vm/drop_caches", W_OK) == 0)) {
    ctx.drop = DropMethod::kDropCaches;
  } else {
    ctx.drop = DropMethod::kFadvise;
  }
  if (Status s = drop_cache(ctx); !s) {
    if (want != "auto" || ctx.drop == DropMethod::kFadvise) return s;
    ctx.drop = DropMethod::kFadvise;
    QLOAD_TRY(drop_cache(ctx));
  }
  fmt::print(stderr, "cold runs drop the page cache with {}\n",
             ctx.drop == DropMethod::kDropCaches ? "sync + echo 3 > /proc/sys/vm/drop_caches (root)"
                                                 : "posix_fadvise(POSIX_FADV_DONTNEED) on the test file");
  return {};
}

}  // namespace qload::bench
