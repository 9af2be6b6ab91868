// A checkpoint file opened for reading: the buffered descriptor, and an O_DIRECT descriptor
// when the file system allows one. Move-only; closing is the destructor's job.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "qload/runtime/error.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace qload::io {

enum class DirectMode : std::uint8_t {
  // O_DIRECT for a file the page cache does not already hold (at least half of it, at open),
  // where the file system supports it and a read's alignment allows it. A warm file is read
  // buffered: the page cache gives it at memory speed, O_DIRECT would fetch it from the device
  // again (seen on an H100 machine: a warm 6 GB load to the GPU ran at the disk's 1.3 GB/s).
  kAuto,
  kOn,   // O_DIRECT wherever a read's alignment allows; a file that refuses O_DIRECT is an error
  kOff,  // buffered reads only
};

// At least this fraction of a file in the page cache makes kAuto read it buffered.
inline constexpr double kCachedEnoughForBuffered = 0.5;

// What identifies the file's contents at open time, re-checked after a load (a file that
// changed under us must not pass as the one we read).
struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
};

// Descriptors an InputFile may hold: its buffered one and an O_DIRECT one.
inline constexpr std::uint64_t kDescriptorsPerFile = 2;

// Makes room for `files` more InputFiles in this process (a load keeps every file of its
// checkpoint open, and an index may name 100,000 shards): raises the soft RLIMIT_NOFILE toward
// the hard limit when the descriptors open now plus theirs (up to kDescriptorsPerFile each)
// would not fit. kUnsupported naming both limits when even one descriptor per file is more
// than the hard limit allows, before anything is opened.
Status reserve_open_files(std::uint64_t files);

// A regular file opened read-only, and its identity taken from that descriptor.
struct RegularFile {
  UniqueFd fd;
  FileIdentity identity;
};

// The one way a checkpoint file is opened (catalog, load, mmap load, auto mode): O_NONBLOCK
// and O_NOCTTY so that a FIFO or a device planted where a file should be cannot hang the open,
// then anything but a regular file is refused (kInvalidArgument) and O_NONBLOCK is cleared
// (io_uring may honour it on a regular file with -EAGAIN). Errors name `path`.
Result<RegularFile> open_regular(const std::string& path);

// Where descriptor `fd` points now, as the kernel resolves it (/proc/self/fd/N): the real
// path of the very inode that will be read, so a check on it cannot be raced by a rename.
// Errors name `path` (the name it was opened by).
Result<std::string> descriptor_path(int fd, const std::string& path);

class InputFile {
 public:
  // Opens `path` read-only through open_regular. `expected`, when given (the identity the
  // catalog took from the descriptor it validated), must match the opened file's device,
  // inode and size, else kFileChanged naming `path`: a load reads only the inode that was
  // checked, never one renamed or linked over it since. With kAuto, a file system that refuses
  // O_DIRECT simply gets no direct descriptor; with kOn it is an error. The O_DIRECT
  // descriptor reopens the same inode through /proc/self/fd, never the path.
  static Result<InputFile> open(std::string path, DirectMode direct = DirectMode::kAuto,
                                const std::optional<FileIdentity>& expected = std::nullopt);

  InputFile(InputFile&&) noexcept = default;
  InputFile& operator=(InputFile&&) noexcept = default;

  const std::string& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return identity_.size; }
  const FileIdentity& identity() const noexcept { return identity_; }
  int fd() const noexcept { return fd_.get(); }
  // -1 when O_DIRECT is not in use for this file.
  int direct_fd() const noexcept { return direct_fd_.get(); }
  // Offset, length and memory alignment O_DIRECT needs here (a power of two; 0 without direct).
  std::uint32_t direct_alignment() const noexcept { return direct_alignment_; }
  // Stops using O_DIRECT for this file (after the kernel refused an aligned direct read).
  void disable_direct() noexcept;
  // With kAuto: the fraction of the file the page cache held at open (1 when not asked).
  double resident_at_open() const noexcept { return resident_at_open_; }

  // kFileChanged if the file opened has been resized or rewritten since (fstat of the
  // descriptor held: no reopen by path, so nothing can block here and a file renamed over the
  // path afterwards does not matter: it was never read).
  Status check_unchanged() const;

 private:
  InputFile() = default;
  std::string path_;
  UniqueFd fd_;
  UniqueFd direct_fd_;
  std::uint32_t direct_alignment_ = 0;
  double resident_at_open_ = 1.0;
  FileIdentity identity_;
};

// Reads the identity of an open descriptor.
Result<FileIdentity> identify(int fd, const std::string& path);

}  // namespace qload::io
