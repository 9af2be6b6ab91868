// A checkpoint file opened for reading: the buffered descriptor, and an O_DIRECT descriptor
// when the file system allows one. Move-only; closing is the destructor's job.
#pragma once

#include <sys/types.h>

#include <cstdint>
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

class InputFile {
 public:
  // Opens `path` read-only. With kAuto, a file system that refuses O_DIRECT simply gets no
  // direct descriptor; with kOn it is an error.
  static Result<InputFile> open(std::string path, DirectMode direct = DirectMode::kAuto);

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

  // kFileChanged if the file at path() is no longer the one opened (replaced, resized or
  // rewritten since).
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
