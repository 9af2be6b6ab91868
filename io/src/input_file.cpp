#include "qload/io/input_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include <fmt/format.h>

#include "qload/io/page_cache.hpp"

namespace qload::io {
namespace {

// The alignment O_DIRECT needs on this file: statx's STATX_DIOALIGN where the kernel reports
// it (Linux 6.1+), else the conservative 4096 that every common file system accepts.
std::uint32_t direct_alignment_of(int fd) {
#ifdef STATX_DIOALIGN
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
      sx.stx_dio_offset_align != 0 && sx.stx_dio_mem_align != 0)
    return std::max(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
#else
  (void)fd;
#endif
  return 4096;
}

// Descriptors this process has open now (/proc/self/fd; 0 where it cannot be read).
std::uint64_t open_descriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  std::uint64_t n = 0;
  while (const dirent* entry = ::readdir(dir)) n += entry->d_name[0] != '.' ? 1 : 0;
  ::closedir(dir);
  return n;
}

}  // namespace

Status reserve_open_files(std::uint64_t files) {
  constexpr std::uint64_t kSpare = 64;  // sockets, io_uring, the caller's own
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};  // nothing known: let open() say
  const std::uint64_t open_now = open_descriptors();
  // Every file takes one descriptor; a cold file read with O_DIRECT a second one.
  const std::uint64_t least = open_now + files + kSpare;
  const std::uint64_t most = open_now + files * kDescriptorsPerFile + kSpare;
  if (limit.rlim_cur == RLIM_INFINITY || most <= limit.rlim_cur) return {};
  if (limit.rlim_max != RLIM_INFINITY && least > limit.rlim_max)
    return fail(Errc::kUnsupported,
                fmt::format("{} files need at least {} open descriptors, more than this process may have (ulimit -n: "
                            "soft {}, hard {}); raise the hard limit",
                            files, least, limit.rlim_cur, limit.rlim_max));
  const rlim_t raised = limit.rlim_max == RLIM_INFINITY ? most : std::min<rlim_t>(most, limit.rlim_max);
  if (raised <= limit.rlim_cur) return {};
  limit.rlim_cur = raised;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0)
    return fail(Error::from_errno(errno, fmt::format("raising the open-file limit to {} for {} files", raised, files)));
  return {};
}

Result<FileIdentity> identify(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(Error::from_errno(errno, "fstat").with_file(path));
  if (!S_ISREG(st.st_mode)) return fail(Error(Errc::kInvalidArgument, "not a regular file").with_file(path));
  return FileIdentity{st.st_dev, st.st_ino, static_cast<std::uint64_t>(st.st_size),
                      std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
}

Result<RegularFile> open_regular(const std::string& path) {
  RegularFile file;
  file.fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!file.fd) return fail(Error::from_errno(errno, "open").with_file(path));
  QLOAD_ASSIGN_OR_RETURN(file.identity, identify(file.fd.get(), path));
  const int flags = ::fcntl(file.fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(file.fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    return fail(Error::from_errno(errno, "clear O_NONBLOCK").with_file(path));
  return file;
}

Result<std::string> descriptor_path(int fd, const std::string& path) {
  const std::string link = fmt::format("/proc/self/fd/{}", fd);
  std::string target(PATH_MAX, '\0');
  const ssize_t n = ::readlink(link.c_str(), target.data(), target.size());
  if (n < 0)
    return fail(
        Error::from_errno(errno, "resolve the opened file through /proc/self/fd (is /proc mounted?)").with_file(path));
  if (static_cast<std::size_t>(n) >= target.size())
    return fail(Error(Errc::kUnsupported, "the opened file's path is longer than PATH_MAX").with_file(path));
  target.resize(static_cast<std::size_t>(n));
  return target;
}

namespace {

// A second descriptor on the very inode `fd` holds, with O_DIRECT: reopened through
// /proc/self/fd, so a path renamed meanwhile cannot substitute another file. Invalid when the
// file system refuses O_DIRECT (errno says why) or /proc is missing.
UniqueFd reopen_direct(int fd, const FileIdentity& identity) {
  const std::string link = fmt::format("/proc/self/fd/{}", fd);
  // No O_NONBLOCK needed: the inode behind `fd` is already known to be a regular file.
  UniqueFd direct(::open(link.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  if (!direct) return direct;
  struct stat st {};
  if (::fstat(direct.get(), &st) != 0 || st.st_dev != identity.dev || st.st_ino != identity.ino) {
    errno = ESTALE;
    return UniqueFd();
  }
  return direct;
}

}  // namespace

Result<InputFile> InputFile::open(std::string path, DirectMode direct, const std::optional<FileIdentity>& expected) {
  InputFile file;
  QLOAD_ASSIGN_OR_RETURN(RegularFile opened, open_regular(path));
  file.fd_ = std::move(opened.fd);
  file.identity_ = opened.identity;
  // Before anything else touches the descriptor: it must be the inode the catalog checked.
  if (expected && (file.identity_.dev != expected->dev || file.identity_.ino != expected->ino))
    return fail(Error(Errc::kFileChanged, "file replaced since its header was read (another inode at this path)")
                    .with_file(std::move(path)));
  if (expected && file.identity_.size != expected->size)
    return fail(Error(Errc::kFileChanged, fmt::format("file is {} bytes now, {} when its header was read",
                                                      file.identity_.size, expected->size))
                    .with_file(std::move(path)));
  if (direct == DirectMode::kAuto) {
    // A file that cannot be asked about is treated as cold: O_DIRECT, as before.
    file.resident_at_open_ = page_cache_resident_fraction(file.fd_.get(), file.identity_.size).value_or(0.0);
    if (file.resident_at_open_ >= kCachedEnoughForBuffered) direct = DirectMode::kOff;
  }
  if (direct != DirectMode::kOff) {
    file.direct_fd_ = reopen_direct(file.fd_.get(), file.identity_);
    if (file.direct_fd_) {
      file.direct_alignment_ = direct_alignment_of(file.direct_fd_.get());
    } else if (direct == DirectMode::kOn) {
      return fail(Error::from_errno(errno, "open with O_DIRECT (direct I/O was required)").with_file(std::move(path)));
    }
  }
  // Sequential hint for the buffered path: doubles the kernel's readahead window.
  (void)::posix_fadvise(file.fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  file.path_ = std::move(path);
  return file;
}

void InputFile::disable_direct() noexcept {
  direct_fd_.reset();
  direct_alignment_ = 0;
}

Status InputFile::check_unchanged() const {
  QLOAD_ASSIGN_OR_RETURN(const FileIdentity current, identify(fd_.get(), path_));
  if (current != identity_)
    return fail(Error(Errc::kFileChanged,
                      fmt::format("file changed while loading (size {} -> {})", identity_.size, current.size))
                    .with_file(path_));
  return {};
}

}  // namespace qload::io
