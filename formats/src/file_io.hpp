// Plain POSIX reads for headers and small JSON files. Bulk tensor reads are the io layer's job;
// these are the few small reads needed to build a Catalog.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qload/runtime/error.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace qload::formats {

struct OpenedFile {
  UniqueFd fd;
  std::uint64_t size = 0;
};

// Opens `path` read-only. O_NONBLOCK keeps a FIFO planted where a file should be from hanging
// the open; anything that is not a regular file is then refused (kInvalidArgument).
Result<OpenedFile> open_regular_file(const std::string& path);

// Reads exactly out.size() bytes at `offset`, retrying EINTR and short reads; end of file
// first is kTruncated. Errors name `path` and the offset.
Status pread_exact(int fd, std::span<std::byte> out, std::uint64_t offset, const std::string& path);

// A buffer of `n` bytes, or kOutOfMemory (never a bad_alloc).
Result<std::vector<std::byte>> allocate_bytes(std::uint64_t n, const std::string& path);

// The whole of a regular file no larger than `max_bytes` (kUnsupported beyond).
Result<std::vector<std::byte>> read_small_file(const std::string& path, std::uint64_t max_bytes);

}  // namespace qload::formats
